#!/usr/bin/env bash
# Call 161, right after 160 on the same lease: perf baseline 0035, the whole suite with the mlx_lm rows (first baseline to hold them), on the noted-ranges package.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py > $OUT/md5.txt
timeout 400 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
tail -3 $OUT/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $OUT/
python3 ci/baseline_table.py "$new" | tee $OUT/baseline_table.md
date -u >> $OUT/times.txt; cat $OUT/times.txt
