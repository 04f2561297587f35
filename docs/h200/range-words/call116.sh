#!/usr/bin/env bash
# Call 116: do the kernels wait for a page their small constant inputs share with a Python-made
# array? The padded loops with dims and scalars padded to 64 KiB (this tree) against 16 bytes
# (as before), with and without an unused Python-made array each step; then the property and
# parity suites on this tree.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
export PADDED_VARIANTS="made from Python|none|16-byte"
for mode in --each-step ""; do for B in 8 32; do
  PADDED_ROUNDS=15 timeout 100 python3 ci/gpu/padded_loop_cost.py $B 2048 $mode
done; done 2>&1 | grep -v -i warn > $OUT/padded_loop_cost.log
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: print(line.strip()); continue
    walls = sorted(x[0] for x in r["rounds"])
    print(r["B"], r["each_step"], r["key_ranges"][:60], r["step_wall_us"], walls[len(walls)//4], walls[3*len(walls)//4], r["decode_kernel_us_median"], r["all_kernels_us_a_step"])' $OUT/padded_loop_cost.log
date -u >> $OUT/times.txt
OUT=$OUT/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=400 TEST_S=380 ci/gpu/h200-session.sh verify
gzip -f $OUT/verify/suite.log; date -u >> $OUT/times.txt; cat $OUT/times.txt
