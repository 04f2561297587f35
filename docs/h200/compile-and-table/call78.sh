#!/usr/bin/env bash
# The GPU path inside mx.compile (ci/gpu/compile_check.py), then a third cold table on 513adac's kernels
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 120 python3 ci/gpu/compile_check.py > $R/compile_check.log 2>&1; echo "compile_check rc=$?" >> $R/times.txt
cat $R/compile_check.log
OUT=$R/table BENCH_S=170 timeout 200 bash ci/gpu/h200-session.sh cold-bench > $R/cold-bench.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt
python3 ci/bench_targets.py $R/table/bench-cold.json 2>&1 | tail -22
tar -czf $OUT/call78.tgz -C $OUT r && rm -rf $R
