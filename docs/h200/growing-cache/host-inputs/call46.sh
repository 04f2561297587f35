#!/usr/bin/env bash
# what inputs cost MLX's cuda_kernel a call (empty kernels of 1-11 inputs, with/without strides), ours 4-bit vs bf16; and the host part of a 4-bit call at the big shape
export PYTHONPATH=$PWD
md5sum metal/* > $OUT/metal.md5
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
for bs in "8 8192" "1 2048"; do echo "== input_cost $bs"; timeout 120 python3 ci/gpu/input_cost.py $bs 2>&1 | grep -v -i warn; done 2>&1 | tee $OUT/input_cost.log
for args in "32 32768 --fmt q4" "32 32768 --fmt bfloat16" "32 32768 --fmt bfloat16 --impl mx.fast.sdpa"; do
  echo "== $args"; timeout 90 python3 ci/gpu/kernel_gaps.py $args 2>&1 | grep -v -i warn | tail -6
done 2>&1 | tee $OUT/gaps.log
