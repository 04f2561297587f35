#!/usr/bin/env bash
# Call 191 (2026-12-04), a new lease after staging (carry .gpu/p1..p3 with `bash ci/gpu/stage-parts.sh
# receive .gpu/pN`, then .gpu/p4 with `receive .gpu/p4 && install >/dev/null && bash
# docs/h200/nan-rows/call191.sh`): the property suite with S up to 16385 (FUSEDATTEND_WIDE=1) on
# the NaN-row kernels, as calls 138 and 174 did on the kernels before.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify FUSEDATTEND_WIDE=1 SUITE_TESTS="tests/property" SUITE_S=380 TEST_S=370 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
