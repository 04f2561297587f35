#!/usr/bin/env bash
# Call 110: ci/gpu/padded_loop_cost.py with MLX's SDPA beside ours (the boolean mask made each
# step, the perf rows' peer, and no mask), every step evaluated (--each-step), then queued.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt
for mode in --each-step ""; do for B in 8 32; do
  timeout 80 python3 ci/gpu/padded_loop_cost.py $B 2048 $mode
done; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    print(r["B"], r["each_step"], r["key_ranges"][:40], r["step_wall_us"], r["decode_kernel_us_median"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt
