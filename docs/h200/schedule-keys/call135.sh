#!/usr/bin/env bash
# Call 135: the property and parity suites with --backend cuda on the tip's package (6bfb2db:
# the one-block key carries its bound), with the replay, launch-input and dispatch tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity tests/test_replay.py tests/test_launch_inputs.py tests/test_dispatch.py" \
  SUITE_S=330 TEST_S=310 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
