#!/usr/bin/env bash
# Call 207 (2026-12-05), after staging: the perf record with the mlx_lm rows' new protocol
# (tests/perf/test_mlx_lm_perf.py: steps as generate_step takes them): H100 baseline 0002.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 330 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
grep -h "passed\|failed" $OUT/perf_record.log | tail -2
tar -C tests/perf/baselines -cf $OUT/baselines.tar nvidia-h100-80gb-hbm3
date -u >> $OUT/times.txt
