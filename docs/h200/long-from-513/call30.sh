#!/usr/bin/env bash
# bf16 (and 4-bit) at S = 1024-4096: longer split blocks (MIN_BLOCK 512, 1024; 2 simdgroups) against the tip,
# queued and chained; ncu of the bf16 kernels at B = 32, S = 2048
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
for set in '{}' '{"MIN_BLOCK": 512}' '{"MIN_BLOCK": 1024}'; do
  n=$(echo "$set" | tr -dc '0-9'); PROBE_SET="$set" timeout 90 ncu --clock-control none --metrics $M python3 ci/gpu/probe.py 32 2048 > $R/ncu_32_2048_${n:-tip}.txt 2>&1
done
date -u >> $R/times.txt
V=('{}' '{"MIN_BLOCK": 512}' '{"MIN_BLOCK": 1024}' '{"MIN_BLOCK": 512, "SIMDGROUPS": 2}')
SH=1x1024,8x1024,32x1024,1x2048,8x2048,32x2048,1x4096,32x4096
OUT=$R SWEEP_ROUNDS=4 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 200 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-queued.log 2>&1; date -u >> $R/times.txt
mv $R/schedule_sweep.json $R/sweep-queued.json
OUT=$R SWEEP_CHAIN=1 SWEEP_ROUNDS=4 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 200 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-chained.log 2>&1; date -u >> $R/times.txt
mv $R/schedule_sweep.json $R/sweep-chained.json
cat $R/times.txt
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "^  [a-z_]+.*\(|duration|dram__|inst_executed|warps_active|issue_active|grid_size|registers" $f | sed 's/(const __nv_bfloat16 \*, array.*) (/(...) (/' | cut -c1-110 | head -40; done
cut -c1-170 $R/sweep-queued.log | tail -n 34; cut -c1-170 $R/sweep-chained.log | tail -n 34
tar -czf $OUT/call30.tgz -C $OUT r && rm -rf $R
