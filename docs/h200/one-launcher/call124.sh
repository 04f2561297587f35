#!/usr/bin/env bash
# Call 124: a new H200 perf baseline (tests/perf, now with short loops and loops with every step
# evaluated) on this tree, and its tables.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py > $OUT/md5.txt
timeout 420 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
tail -3 $OUT/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $OUT/
python3 ci/baseline_table.py "$new" | tee $OUT/baseline_table.md
date -u >> $OUT/times.txt; cat $OUT/times.txt
