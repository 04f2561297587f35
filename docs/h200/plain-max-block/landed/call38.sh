#!/usr/bin/env bash
# plain K/V in 2048-key blocks from S = 32768 (287de59): the suites, then the cold table; results written as they come
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite $R/table; md5sum metal/* > $R/metal.md5; grep -n "^PLAIN_LONG\|^MAX_BLOCK\|^MIN_BLOCK" fusedattend/gpu.py | tee $R/policy.txt; date -u > $R/times.txt
OUT=$R/suite SUITE_TESTS="tests/property tests/kernels/test_gpu_schedule.py tests/parity" SUITE_S=330 TEST_S=320 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1; date -u >> $R/times.txt
cat $R/verify.out; grep -E "32769" $R/suite/suite.log | grep -c PASSED
OUT=$R/table BENCH_S=120 ci/gpu/h200-session.sh cold-bench > $R/table/cold-bench.out 2>&1; date -u >> $R/times.txt
cat $R/times.txt; tail -n 9 $R/table/cold-bench.out; grep -E "^\| (8|32) \| 32768 " $R/table/bench-cold-targets.md
