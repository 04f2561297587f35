#!/usr/bin/env bash
# Call 194 (2026-12-04), right after call 193 on the same machine: the kernel tests and every
# top-level test file with --backend cuda, on the same package.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels $(ls tests/test_*.py)" SUITE_S=420 TEST_S=400 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
