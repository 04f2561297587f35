#!/usr/bin/env bash
# Call 109: ci/gpu/padded_loop_cost.py with every step evaluated before the next is built (a
# server's loop), at B = 8 and 32: does the page move that the host check's read causes (call
# 108) come every step there?
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt
for B in 8 32; do timeout 150 python3 ci/gpu/padded_loop_cost.py $B 2048 --each-step; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost_each_step.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); print(r["B"], r["key_ranges"], r["step_wall_us"], r["decode_kernel_us_median"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost_each_step.log
date -u >> $OUT/times.txt
