#!/usr/bin/env bash
# Call 153, right after 152 on the same machine: the property and parity suites with
# --backend cuda on this package (tests/parity now holds test_mlx_lm_batched.py too).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
