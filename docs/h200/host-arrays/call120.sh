#!/usr/bin/env bash
# Call 120: kernel, replay, API, compile, key_ranges-check and launch-input tests with --backend
# cuda on the same tree; then the padded loops, shipped (constants on the device) against the
# constants made from Python as before (ci/gpu/padded_loop_cost.py's "(constants made from Python)").
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/padded_loop_cost.py > $OUT/md5.txt
OUT=$OUT/verify SUITE_TESTS="tests/kernels tests/test_replay.py tests/test_api.py tests/test_compile.py tests/test_key_ranges_check.py tests/test_launch_inputs.py" \
  SUITE_S=270 TEST_S=250 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt
export PADDED_VARIANTS="made from Python each step|none"
for mode in --each-step ""; do for B in 8 32; do
  PADDED_ROUNDS=12 timeout 120 python3 ci/gpu/padded_loop_cost.py $B 2048 $mode
done; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    walls = sorted(x[0] for x in r["rounds"])
    print(r["B"], r["each_step"], r["key_ranges"][:80], r["step_wall_us"], walls[len(walls)//4], walls[3*len(walls)//4], r["decode_kernel_us_median"], r["all_kernels_us_a_step"], r["kernels_us_a_step_by_name"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt; cat $OUT/times.txt
