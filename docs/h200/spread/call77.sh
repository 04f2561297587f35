#!/usr/bin/env bash
# Why the spread launch (call76) is slower at B = 1, S = 2048: Nsight Compute of the decode kernel spread and
# gathered, bf16 and 4-bit (the patch applied on the device only; metal/ of afbcb2d otherwise)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
git apply docs/h200/spread/spread-simdgroups.diff || exit 4
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
sections="--section SpeedOfLight --section LaunchStats --section Occupancy"
m="gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.max,sm__cycles_active.avg,smsp__warps_active.avg.per_cycle_active"
m="$m,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum"
for s in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle barrier not_selected selected dispatch_stall no_instruction branch_resolving membar drain; do
  m="$m,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"
done
prof() { tag=$1; PROBE_SET="$2" timeout 100 ncu --clock-control none -k "regex:$5" -c 1 $sections --metrics "$m" python3 ci/gpu/probe.py $3 $4 > $R/ncu_$tag.txt 2>&1; echo "$tag rc=$?"; }
prof bf16_spread '{}' 1 2048 fa_decode_mma
prof bf16_gathered '{"SPREAD_MAX_THREADGROUPS": 0}' 1 2048 fa_decode_mma
prof q4_spread '{}' 1 2048 fa_quantized_decode_mma
prof q4_gathered '{"SPREAD_MAX_THREADGROUPS": 0}' 1 2048 fa_quantized_decode_mma
date -u >> $R/times.txt; cat $R/times.txt
for f in $R/ncu_*.txt; do echo "=== $f"; grep -E "^  [a-z_].*\(|Duration|Grid Size|Block Size|Registers Per|Achieved Occupancy|gpu__time|smsp__inst_executed.sum|sm__cycles_active|warps_active|l1tex__|lts__|stalled|dram__bytes" $f | grep -v "^ *$" | awk '$NF != "0" && $NF != "0.00"' | sed 's/  */ /g' | cut -c1-110; done
tar -czf $OUT/call77.tgz -C $OUT r && rm -rf $R
