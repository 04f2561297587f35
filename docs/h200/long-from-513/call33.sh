#!/usr/bin/env bash
# plain K/V in 1024-key matrix blocks from S = 513: suites, with memcheck and racecheck over the pinned layouts and the split schedules beside them
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
( OUT=$R/suite SUITE_TESTS="tests/property tests/kernels/test_gpu_schedule.py tests/parity" SUITE_S=480 TEST_S=460 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1; date -u >> $R/times.txt ) &
( OUT=$R/san SANITIZER_MMA_S=420 SANITIZER_TOOLS=memcheck SANITIZER_SETS="layouts split_mma" ci/gpu/h200-session.sh sanitize > $R/san-memcheck.out 2>&1; date -u >> $R/times.txt ) &
( OUT=$R/san SANITIZER_MMA_S=420 SANITIZER_TOOLS=racecheck SANITIZER_SETS="layouts split_mma" ci/gpu/h200-session.sh sanitize > $R/san-racecheck.out 2>&1; date -u >> $R/times.txt ) &
wait
cat $R/times.txt $R/verify.out $R/san-*.out
tar -czf $OUT/call33.tgz -C $OUT r && rm -rf $R
