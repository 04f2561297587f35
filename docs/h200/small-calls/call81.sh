#!/usr/bin/env bash
# Small queued calls: build against evaluation (ci/gpu/small_calls.py), cold and warm, with MLX's
# default graph size and with 100 nodes a CUDA graph; queued GPU time at B = 1, S = 2048 (kernel_gaps.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; git rev-parse HEAD > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R timeout 200 python3 ci/gpu/small_calls.py > $R/small_calls.log 2>&1; echo "rc=$?" >> $R/times.txt
date -u >> $R/times.txt
MLX_MAX_OPS_PER_BUFFER=100 OUT=$R timeout 120 python3 ci/gpu/small_calls.py --cold-mb 200 --tag ops100 > $R/small_calls_ops100.log 2>&1; echo "rc=$?" >> $R/times.txt
date -u >> $R/times.txt
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" 2>&1 | grep -v "^\[W" | tail -7; }
{ for f in bfloat16 q4; do gaps 1 2048 --fmt $f --impl cuda; done; gaps 1 2048 --fmt q4 --impl mlx_lm.qsdpa; gaps 1 2048 --fmt bfloat16 --impl mx.fast.sdpa; } > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt
cat $R/small_calls.log $R/small_calls_ops100.log
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tar -czf $OUT/call81.tgz -C $OUT r && rm -rf $R
