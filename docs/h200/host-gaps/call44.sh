#!/usr/bin/env bash
# where a queued sample's time goes: kernels and the gaps between them (torch.profiler's CUPTI trace), 4-bit and bf16
export PYTHONPATH=$PWD
command -v nsys || echo "no nsys"
md5sum metal/* > $OUT/metal.md5
for args in "8 8192 --fmt q4" "32 8192 --fmt q4" "8 2048 --fmt q4" "8 8192 --fmt bfloat16"; do
  echo "== $args"; timeout 100 python3 ci/gpu/kernel_gaps.py $args 2>&1 | grep -v Warning | tail -7
done 2>&1 | tee $OUT/gaps.log
