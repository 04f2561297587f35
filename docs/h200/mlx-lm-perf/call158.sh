#!/usr/bin/env bash
# Call 158 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: a new H200 perf baseline with tests/perf's new mlx_lm model-step rows
# (tests/perf/test_mlx_lm_perf.py) beside the kernel rows; the saved baselines come back as a tar.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 420 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc $?" >> $OUT/times.txt
tar -C tests/perf/baselines -cf $OUT/baselines.tar .; date -u >> $OUT/times.txt
grep -E 'passed|failed|error' $OUT/perf_record.log | tail -3; cat $OUT/times.txt
