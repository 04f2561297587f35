#!/usr/bin/env bash
# Call 180, the lease's first after staging (carry .gpu/p4; run as `bash ci/gpu/stage-parts.sh
# receive .gpu/p4 && bash ci/gpu/stage-parts.sh install >/dev/null && bash docs/h200/nan-rows/call180.sh`):
# the kernel tests and every top-level test file with --backend cuda, on the package whose
# kernels keep NaN that reached a visible score (fa_normalise: l != 0; fa_masked_score: only -inf
# hides a key of an additive mask).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels $(ls tests/test_*.py)" SUITE_S=420 TEST_S=400 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
