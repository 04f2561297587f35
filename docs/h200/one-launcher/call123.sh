#!/usr/bin/env bash
# Call 123: a decode loop's single launches with one launcher for every S (1a927bc) against a
# launcher for each S (the replayer's key before), the dims-per-S form before a74e2dd, and MLX's
# SDPA (ci/gpu/single_launch_dims.py); then the kernel, replay, API, compile, key_ranges-check and
# launch-input tests with --backend cuda on this tree.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/single_launch_dims.py > $OUT/md5.txt
for mode in --each-step ""; do for B in 1 8 32; do
  SINGLE_ROUNDS=15 timeout 60 python3 ci/gpu/single_launch_dims.py $B 64 $mode
done; done 2>&1 | grep -v -i warn | tee $OUT/single_launch_dims.log
date -u >> $OUT/times.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels tests/test_replay.py tests/test_api.py tests/test_compile.py tests/test_key_ranges_check.py tests/test_launch_inputs.py" \
  SUITE_S=270 TEST_S=250 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
