#!/usr/bin/env bash
# property, parity and kernel suites on plain K/V in pieces (fa_run_dim)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite
md5sum metal/* > $R/metal.md5; git log -1 --format=%H > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R/suite SUITE_TESTS="tests/property tests/parity tests/kernels" SUITE_S=480 TEST_S=420 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt $R/verify.out
tar -czf $OUT/call68.tgz -C $OUT r && rm -rf $R
