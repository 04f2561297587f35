#!/usr/bin/env bash
# plain K/V's tiles asked ahead into L2 on small grids (gpu.PLAIN_PREFETCH_TILES = 4 at <= 256 threadgroups): GPU time chained, off against on; then the suites with it
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/gaps $R/suite
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --fmt bfloat16 --impl cuda --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
for bs in "1 2048" "1 8192" "1 32768" "8 2048"; do
  gaps $bs --set '{"PLAIN_PREFETCH_TILES": 0}'; gaps $bs
done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n>=3 && n<=5) print h " | " $0}' | sed -E 's/"(wall_us|build_us|lead_us|largest_gap_us|tail_us|kernels)": [0-9.]+,? ?//g'
OUT=$R/suite SUITE_TESTS="tests/property tests/kernels/test_gpu_schedule.py tests/kernels/test_growing_cache.py" SUITE_S=320 TEST_S=300 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt $R/verify.out; grep -c "PASSED.*plain_prefetch" $R/suite/suite.log
tar -czf $OUT/call55.tgz -C $OUT r && rm -rf $R
