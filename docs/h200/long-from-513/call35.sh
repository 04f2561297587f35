#!/usr/bin/env bash
# plain K/V in 1024-key matrix blocks from S = 513: two more cold tables, and A/B/A' at S = 2048 against the old threshold
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; grep -n "^PLAIN_LONG_BLOCKS_FROM_S" fusedattend/gpu.py | tee $R/policy.txt; date -u > $R/times.txt
for t in a b; do
  mkdir -p $R/$t; OUT=$R/$t BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $R/$t/cold-bench.out 2>&1; date -u >> $R/times.txt
done
V=('{}' '{"PLAIN_LONG_BLOCKS_FROM_S": 4096}' '{"SIMDGROUPS": 4}')
SH=1x2048,8x2048,32x2048
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_ROUNDS=8 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 120 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-queued.log 2>&1; date -u >> $R/times.txt
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_CHAIN=1 SWEEP_ROUNDS=8 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 120 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-chained.log 2>&1; date -u >> $R/times.txt
rm -f $R/schedule_sweep.json
cat $R/times.txt; for t in a b; do tail -n 9 $R/$t/cold-bench.out; grep -E "^\| (1|8|32) \| (2048|8192) " $R/$t/bench-cold-targets.md; done
cut -c1-150 $R/sweep-queued.log; cut -c1-150 $R/sweep-chained.log
tar -czf $OUT/call35.tgz -C $OUT r && rm -rf $R
