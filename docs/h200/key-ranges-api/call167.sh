#!/usr/bin/env bash
# Call 167, right after 166 on the same lease (run as this one command line): compute-sanitizer
# memcheck and racecheck over three sets of ci/gpu/h200-session.sh sanitize: the parity grid, the
# key ranges (tests/kernels/test_gpu_schedule.py, tests/test_replay.py, tests/test_api.py -k
# key_ranges: KeyRanges.from_padding among them), the pinned layouts. Not grid_b and split_mma:
# their racecheck runs past the device time that was left.
python3 -c 'import mlx.core' || exit 3; export PYTHONPATH=$PWD; SANITIZER_S=200 SANITIZER_SETS="grid key_ranges layouts" SANITIZER_PARALLEL=1 ci/gpu/h200-session.sh sanitize > $OUT/sanitize.log 2>&1; echo "sanitize rc $?"; date -u; tail -30 $OUT/sanitize.log; grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/*.log | sort | uniq -c
