#!/usr/bin/env bash
# (run inline as the call's command, right after call73.sh on the same machine) the kernel and replay tests with --backend cuda
export PYTHONPATH=$PWD; R=$OUT/r; mkdir -p $R/suite; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt; python3 -c 'import mlx.core' || exit 3; OUT=$R/suite SUITE_TESTS="tests/kernels tests/test_replay.py" SUITE_S=300 TEST_S=280 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1; date -u >> $R/times.txt; cat $R/times.txt; tail -8 $R/verify.out; tar -czf $OUT/call74.tgz -C $OUT r && rm -rf $R
