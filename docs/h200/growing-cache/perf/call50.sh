#!/usr/bin/env bash
# perf baseline 0029: tests/perf with the new decode-loop rows (growing cache), recorded on the tip
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 250 ci/perf.sh record --backend cuda > $R/perf_record.log 2>&1; echo "record rc=$?" >> $R/times.txt; date -u >> $R/times.txt
cp tests/perf/baselines/nvidia-h200/Linux-CPython-3.12-64bit/0029_nvidia-h200.json $R/ 2>/dev/null
cat $R/times.txt; grep -E "passed|failed|error" $R/perf_record.log | tail -3; grep -A3 "loop bfloat16 B=8 S=2048\|loop q4 B=32 S=32768" $R/perf_record.log | head -12
tar -czf $OUT/call50.tgz -C $OUT r && rm -rf $R
