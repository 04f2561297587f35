#!/usr/bin/env bash
# Call 107: ci/gpu/padded_loop_cost.py again, now with each kind of kernel's µs a step (call 106
# found 6-10 µs more kernel time a step outside the decode kernel with key_ranges than without).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
for B in 8 32; do timeout 120 python3 ci/gpu/padded_loop_cost.py $B 2048; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
cat $OUT/padded_loop_cost.log | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line); print(r["B"], r["key_ranges"], r["step_wall_us"], r["kernels_us_a_step_by_name"])'
