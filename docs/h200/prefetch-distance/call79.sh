#!/usr/bin/env bash
# Plain K/V's L2 hints further ahead at B = 1 (gpu.PLAIN_PREFETCH_TILES: 4 shipped, 8, 16), GPU time chained,
# two rounds in turn; then the bit-identity test of the hints at 16
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
gaps() { echo "== $*"; OUT=$R/gaps/round$round timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
for round in 1 2; do mkdir -p $R/gaps/round$round
  for bs in "1 2048" "1 8192" "1 32768"; do
    for t in 4 8 16; do gaps $bs --fmt bfloat16 --impl cuda --set "{\"PLAIN_PREFETCH_TILES\": $t}"; done
  done
done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt
cat $R/times.txt
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}' | sed 's/--fmt bfloat16 --impl cuda --set //'
tar -czf $OUT/call79.tgz -C $OUT r && rm -rf $R
