#!/usr/bin/env bash
# queued samples, ours against the peers: the calls' build (before mx.eval), the lead to the first kernel, busy, gaps, tail
export PYTHONPATH=$PWD
md5sum metal/* > $OUT/metal.md5
for args in "8 8192 --fmt q4" "8 8192 --fmt q4 --impl mlx_lm.qsdpa" "8 8192 --fmt bfloat16" "8 8192 --fmt bfloat16 --impl mx.fast.sdpa" "32 8192 --fmt q4" "1 2048 --fmt bfloat16" "1 2048 --fmt bfloat16 --impl mx.fast.sdpa"; do
  echo "== $args"; timeout 60 python3 ci/gpu/kernel_gaps.py $args 2>&1 | grep -v -i warn | tail -6
done 2>&1 | tee $OUT/gaps.log
