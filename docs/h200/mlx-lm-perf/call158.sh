#!/usr/bin/env bash
# Call 158 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: a new H200 perf baseline with tests/perf's new mlx_lm model-step rows
# (tests/perf/test_mlx_lm_perf.py) beside the kernel rows; the new baseline and its table come back.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 420 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc $?" >> $OUT/times.txt
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $OUT/
python3 ci/baseline_table.py "$new" > $OUT/baseline_table.md; date -u >> $OUT/times.txt
grep -E 'passed|failed|error' $OUT/perf_record.log | tail -3; grep -A12 'mlx_lm model' $OUT/baseline_table.md; cat $OUT/times.txt
