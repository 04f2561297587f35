#!/usr/bin/env bash
# Call 132: the kernel, replay, API, compile, key_ranges-check, launch-input and dispatch tests
# with --backend cuda on this tree; then ci/host_cost.py on the H200's host (kernels stubbed).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels tests/test_replay.py tests/test_api.py tests/test_compile.py tests/test_key_ranges_check.py tests/test_launch_inputs.py tests/test_dispatch.py" \
  SUITE_S=270 TEST_S=250 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt
for a in "8 2048" "8 2048 q4"; do echo "== $a"; timeout 60 python3 ci/host_cost.py $a; done 2>&1 | tee $OUT/host_cost.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
