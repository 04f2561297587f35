#!/usr/bin/env bash
# Call 134: the top-level test files that failed in calls 132-133 with --backend cuda, mended.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/test_dispatch.py tests/test_cli.py tests/test_cpu_backend.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/test_dispatch.py tests/test_cli.py tests/test_cpu_backend.py" SUITE_S=200 TEST_S=180 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
