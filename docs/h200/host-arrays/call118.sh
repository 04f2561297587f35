#!/usr/bin/env bash
# Call 118: are custom kernels' outputs managed memory (ci/gpu/output_memory.py), and the padded
# loops with our outputs filled by MLX first (padded_loop_cost.py's "(outputs filled)").
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/padded_loop_cost.py ci/gpu/output_memory.py > $OUT/md5.txt
for mb in 256 1; do timeout 60 python3 ci/gpu/output_memory.py $mb; done 2>&1 | grep -v -i warn | tee $OUT/output_memory.log
export PADDED_VARIANTS="made from Python each step|none"
for mode in --each-step ""; do for B in 8 32; do
  PADDED_ROUNDS=15 timeout 150 python3 ci/gpu/padded_loop_cost.py $B 2048 $mode
done; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    walls = sorted(x[0] for x in r["rounds"])
    print(r["B"], r["each_step"], r["key_ranges"][:80], r["step_wall_us"], walls[len(walls)//4], walls[3*len(walls)//4], r["decode_kernel_us_median"], r["all_kernels_us_a_step"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
