#!/usr/bin/env bash
# this machine's host speed against earlier leases (the perf compare's host-bound rows read slow): graph building
# a call (build_eval.py), and GPU time against host time at the rows that failed (kernel_gaps.py --chain)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 90 python3 ci/gpu/build_eval.py 2048 > $R/build_eval.txt 2>&1; echo "build_eval rc=$?" >> $R/times.txt
gaps() { echo "== $*"; OUT=$R/gaps timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
for bs in "1 2048" "8 2048" "1 32768"; do gaps $bs --fmt q4 --impl cuda; gaps $bs --fmt bfloat16 --impl cuda; done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt; cat $R/build_eval.txt | tail -12
grep -E "^==|busy" $R/gaps.log | awk '/^==/{h=$0; n=0; next} {n++; if (n==3) print h " | " $0}'
tar -czf $OUT/call72.tgz -C $OUT r && rm -rf $R
