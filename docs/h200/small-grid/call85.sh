#!/usr/bin/env bash
# call84 again with the staged tile read a tile ahead (into next_tile, as the register loads are): bit identity
# against the register loads on the GPU, then the decode kernel's GPU time chained at 0 / 2 / 4 / 6 stages.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; git rev-parse HEAD > $R/commit.txt 2>/dev/null; git diff > $R/working-tree.diff; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 150 python3 -m pytest tests/kernels/test_gpu_schedule.py -k "plain_staged or plain_prefetch" --backend cuda -q -n 8 -p no:cacheprovider > $R/test_staged.log 2>&1
echo "test rc=$?" >> $R/times.txt; tail -3 $R/test_staged.log
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
for bs in "1 2048" "1 8192" "1 32768" "8 2048"; do
  for n in 0 4 2; do gaps $bs --fmt bfloat16 --impl cuda --set "{\"PLAIN_STAGES\": $n}"; done
done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tar -czf $OUT/call85.tgz -C $OUT r && rm -rf $R
