#!/usr/bin/env bash
# Call 121: one dims for every S of a decode loop's single launches against one made each step
# (ci/gpu/single_launch_dims.py); the padded loop's unused-array rows again, with the constants
# written on the device after mx.clear_cache() (the form of calls 117-118) against as shipped.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/padded_loop_cost.py ci/gpu/single_launch_dims.py > $OUT/md5.txt
for mode in --each-step ""; do for B in 1 8; do
  timeout 100 python3 ci/gpu/single_launch_dims.py $B 64 $mode
done; done 2>&1 | grep -v -i warn | tee $OUT/single_launch_dims.log
export PADDED_VARIANTS="none"
for B in 8 32; do PADDED_ROUNDS=12 timeout 100 python3 ci/gpu/padded_loop_cost.py $B 2048 --each-step; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    walls = sorted(x[0] for x in r["rounds"])
    print(r["B"], r["each_step"], r["key_ranges"][:80], r["step_wall_us"], walls[len(walls)//4], walls[3*len(walls)//4], r["decode_kernel_us_median"], r["all_kernels_us_a_step"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
