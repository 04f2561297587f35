#!/usr/bin/env bash
# Call 133: every top-level test file (tests/test_*.py) with --backend cuda on this tree: the
# mended test_dispatch.py (2 failed in call 132) and the files no earlier GPU run took.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/test_dispatch.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="$(ls tests/test_*.py | tr '\n' ' ')" SUITE_S=300 TEST_S=280 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
