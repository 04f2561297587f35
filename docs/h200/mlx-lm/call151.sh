#!/usr/bin/env bash
# Call 151 (after three calls carried .gpu/p1-p3; this one carries p4 and installs): the
# integration's tests with --backend cuda (now with mlx_lm's generate_step), then the kernel
# tests and every top-level test file on this package.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 150 python3 -m pytest tests/parity/test_mlx_lm_models.py --backend cuda -q -p no:cacheprovider \
  > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels $(ls tests/test_*.py | tr '\n' ' ')" SUITE_S=300 TEST_S=280 \
  ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; tail -3 $OUT/tests.log; cat $OUT/times.txt
