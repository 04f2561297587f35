#!/usr/bin/env bash
# what bounds the plain split kernel at B = 1 (8 simdgroups a block took the same 21.5 µs as 4 at S = 2048,
# call64): Nsight Compute's L1 and pipe throughputs on the active SMs, stall reasons a issued instruction,
# with 4 (shipped) and 8 simdgroups, S = 2048; 4 at S = 32768. cedf4ea (metal/ = f77cc62's)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats"
m="smsp__inst_executed.sum,sm__cycles_active.max,sm__cycles_active.avg,breakdown:l1tex__throughput.avg.pct_of_peak_sustained_active,breakdown:sm__throughput.avg.pct_of_peak_sustained_active"
m="$m,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,dram__bytes_read.sum"
for s in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle barrier not_selected selected dispatch_stall no_instruction branch_resolving misc membar drain imc_miss tex_throttle sleeping; do
  m="$m,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"
done
prof() { tag=$1; shift; PROBE_SET="$1" timeout 120 ncu --clock-control none -k "regex:fa_decode_mma" -c 1 $sections --metrics "$m" python3 ci/gpu/probe.py $2 $3 > $R/ncu_$tag.txt 2>&1; rc=$?; echo "$tag rc=$rc"
  if grep -q "Failed to find metric\|==ERROR==" $R/ncu_$tag.txt; then head -c 600 $R/ncu_$tag.txt
    PROBE_SET="$1" timeout 120 ncu --clock-control none -k "regex:fa_decode_mma" -c 1 $sections --section WarpStateStats --metrics smsp__inst_executed.sum,sm__cycles_active.max python3 ci/gpu/probe.py $2 $3 > $R/ncu_${tag}_plain.txt 2>&1; fi; }
prof nsg4_1_2048 '{}' 1 2048
prof nsg8_1_2048 '{"PLAIN_MMA_SIMDGROUPS": 8}' 1 2048
prof nsg4_1_32768 '{}' 1 32768
date -u >> $R/times.txt; cat $R/times.txt
for f in $R/ncu_*.txt; do echo "=== $f"; grep -E "^  [a-z_].*\(|Duration|Elapsed Cycles|Grid Size|Block Size|Registers Per|smsp__inst_executed.sum|sm__cycles_active|l1tex__|sm__|stalled|dram__bytes|Issue Slots Busy|Executed Ipc" $f | grep -v "^ *$" | awk '$NF != "0" && $NF != "0.00"' | cut -c1-150; done
tar -czf $OUT/call66.tgz -C $OUT r && rm -rf $R
