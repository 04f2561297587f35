#!/usr/bin/env bash
# Call 112: kernel, replay, API, compile and key_ranges-check tests with --backend cuda; then a
# padded decode loop's step with the ranges by value, in memory (as before) and none, beside MLX's
# SDPA with and without the mask (ci/gpu/padded_loop_cost.py), every step evaluated, then queued.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels tests/test_replay.py tests/test_api.py tests/test_compile.py tests/test_key_ranges_check.py" \
  SUITE_S=270 TEST_S=250 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt
for mode in --each-step ""; do for B in 8 32; do
  timeout 75 python3 ci/gpu/padded_loop_cost.py $B 2048 $mode
done; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    print(r["B"], r["each_step"], r["key_ranges"][:44], r["step_wall_us"], r["decode_kernel_us_median"], r["all_kernels_us_a_step"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
