#!/usr/bin/env bash
# Call 164: fusedattend.KeyRanges (this folder's commit) through the property and parity suites
# with --backend cuda (the property suite draws KeyRanges among its key_ranges forms), then the
# files that test key ranges, the API, the replay and decode loops.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify > $OUT/verify.log 2>&1
echo "verify rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_key_ranges_check.py tests/test_api.py tests/test_replay.py \
  tests/test_growing_loop.py tests/kernels/test_growing_cache.py --backend cuda > $OUT/files.log 2>&1
echo "files rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -5 $OUT/verify.log; tail -3 $OUT/files.log; cat $OUT/times.txt
