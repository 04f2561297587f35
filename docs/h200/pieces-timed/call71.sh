#!/usr/bin/env bash
# the tip's kernels timed chained: the chained table, the layer axis, and GPU time chained at B = 32, S = 32768
# (ours, bf16 and 4-bit, against MLX's SDPA and mlx_lm's 4-bit path)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/chain $R/gaps
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R/chain BENCH_S=230 timeout 240 ci/gpu/h200-session.sh chain-bench > $R/chain/chain-bench.out 2>&1
date -u >> $R/times.txt
OUT=$R/chain timeout 90 python3 ci/gpu/layer_axis.py > $R/chain/layers.out 2>&1; echo "layers rc=$?" >> $R/times.txt
gaps() { echo "== $*"; OUT=$R/gaps timeout 60 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
gaps 32 32768 --fmt bfloat16 --impl cuda; gaps 32 32768 --fmt bfloat16 --impl mx.fast.sdpa
gaps 32 32768 --fmt q4 --impl cuda; gaps 32 32768 --fmt q4 --impl mlx_lm.qsdpa
} > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt; tail -9 $R/chain/chain-bench.out; tail -5 $R/chain/layers.out
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tar -czf $OUT/call71.tgz -C $OUT r && rm -rf $R
