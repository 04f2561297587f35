#!/usr/bin/env bash
# Call 131: the property and parity suites with --backend cuda on this tree (gpu._schedule keyed
# by the schedule, 16dd758; metal/ unchanged).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
