#!/usr/bin/env bash
# the tip (no kernel or package change since 513adac's verification at 15:10) verified again: the property and parity suites with --backend cuda, alone on the GPU
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite
md5sum metal/* > $R/metal.md5; git log -1 --format=%H > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R/suite SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt; tail -15 $R/verify.out
tar -czf $OUT/call73.tgz -C $OUT r && rm -rf $R
