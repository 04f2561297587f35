#!/usr/bin/env bash
# Call 178, right after 177 (one command line): the property and parity suites with --backend cuda
# on the tip's package (fusedattend/ and metal/ as 548074c's; tests/parity/test_mlx_lm_batched.py
# with 7806a3a's fixture).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt; OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify; gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
