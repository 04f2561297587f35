#!/usr/bin/env bash
# Call 108: ci/gpu/padded_loop_cost.py with a variant whose key_ranges are never read on the host
# (call 107: with key_ranges the decode kernel's sum a step exceeds its median by 4-5 µs, and no
# other kernel runs); then ci/perf.sh compare against baseline 0032 on this (fresh) machine.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt
for B in 8 32; do timeout 120 python3 ci/gpu/padded_loop_cost.py $B 2048; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); print(r["B"], r["key_ranges"], r["step_wall_us"], r["decode_kernel_us_median"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt
timeout 330 ci/perf.sh compare --backend cuda > $OUT/compare.log 2>&1; echo "compare rc=$?" >> $OUT/compare.log
grep -E "within|slow|FAIL|rc=|no baseline" $OUT/compare.log | tail -8; date -u >> $OUT/times.txt
