#!/usr/bin/env bash
# Call 122: ci/gpu/single_launch_dims.py again, with MLX's SDPA on the same steps, B = 1, 8, 32.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/single_launch_dims.py > $OUT/md5.txt
for mode in --each-step ""; do for B in 1 8 32; do
  SINGLE_ROUNDS=12 timeout 100 python3 ci/gpu/single_launch_dims.py $B 64 $mode
done; done 2>&1 | grep -v -i warn | tee $OUT/single_launch_dims.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
