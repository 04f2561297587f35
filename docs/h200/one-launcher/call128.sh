#!/usr/bin/env bash
# Call 128: what a short loop's step is made of, bf16 and 4-bit: decode_loop.py from S0 = 64
# (ours bf16 and 4-bit, MLX's SDPA, mlx_lm's 4-bit path; queued and host-only rows), and
# kernel_gaps.py at S = 256 (one launch; the kernels' busy time and the gaps a call, chained).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
for B in 1 32; do timeout 100 python3 ci/gpu/decode_loop.py $B 64 --rounds 9 2>&1 | grep -v -i warn | tail -12; done | tee $OUT/decode_loop.log
for fmt in q4 bfloat16; do for impl in cuda mx.fast.sdpa; do
  [ $fmt = q4 ] && [ $impl = mx.fast.sdpa ] && continue
  timeout 60 python3 ci/gpu/kernel_gaps.py 1 256 --fmt $fmt --impl $impl --chain --cold-mb 0 2>&1 | grep -v -i warn | tail -6
done; done | tee $OUT/kernel_gaps.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
