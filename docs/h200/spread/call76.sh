#!/usr/bin/env bash
# Spread simdgroups (decode_mma.metal's SPREAD, small grids): the new GPU test, then GPU time chained and
# queued calls with the spread (gpu.SPREAD_MAX_THREADGROUPS = 128, the default) and without (0)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; git rev-parse HEAD > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 150 python3 -m pytest tests/kernels/test_gpu_schedule.py -k "spread or plain_prefetch" --backend cuda -q -n 8 -p no:cacheprovider > $R/test_spread.log 2>&1
echo "test rc=$?" >> $R/times.txt; tail -3 $R/test_spread.log
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
for bs in "1 2048" "1 8192" "1 32768" "8 2048"; do
  for f in bfloat16 q4; do gaps $bs --fmt $f --impl cuda; gaps $bs --fmt $f --impl cuda --set '{"SPREAD_MAX_THREADGROUPS": 0}'; done
done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt
SWEEP_ROUNDS=3 SWEEP_COLD_MB=200 SWEEP_SHAPES=1x2048,1x8192,1x32768,8x2048,2x8192 OUT=$R timeout 200 \
  python3 ci/gpu/schedule_sweep.py '{}' '{"SPREAD_MAX_THREADGROUPS": 0}' > $R/sweep-queued.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tail -14 $R/sweep-queued.log
tar -czf $OUT/call76.tgz -C $OUT r && rm -rf $R
