#!/usr/bin/env bash
# Call 193 (2026-12-04), after staging (carry .gpu/p1..p3 with `bash ci/gpu/stage-parts.sh receive
# .gpu/pN`, then .gpu/p4 with `receive .gpu/p4 && install >/dev/null && bash
# docs/h200/host-pieces/call193.sh`): the property and parity suites on the tip's package (metal/
# as in 646f822; fusedattend/ with this session's host-side changes).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=560 TEST_S=540 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
