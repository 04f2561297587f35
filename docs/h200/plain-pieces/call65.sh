#!/usr/bin/env bash
# the kernel tests (and replay) after be442be (gpu.set_constants used by the tests), cedf4ea; metal/ = f77cc62
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite
md5sum metal/* > $R/metal.md5; git log -1 --format=%H > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R/suite SUITE_TESTS="tests/kernels tests/test_replay.py" SUITE_S=300 TEST_S=280 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt $R/verify.out
tar -czf $OUT/call65.tgz -C $OUT r && rm -rf $R
