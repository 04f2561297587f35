#!/usr/bin/env bash
# Call 181, right after 180: the property and parity suites with --backend cuda (the new
# properties: NaN reaching a visible score gives NaN rows; K/V views strided along D).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=560 TEST_S=540 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
