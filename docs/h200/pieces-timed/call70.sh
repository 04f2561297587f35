#!/usr/bin/env bash
# the tip's kernels (plain K/V in pieces, 513adac) timed: ci/perf.sh compare against baseline 0029, the cold
# table (issue 5's shapes, peers in the same run), then Nsight Compute's sectors a load request at B = 1
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/table $R/ncu
md5sum metal/* > $R/metal.md5; git log -1 --format=%H > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 250 ci/perf.sh compare --backend cuda > $R/perf_compare.log 2>&1; echo "compare rc=$?" >> $R/times.txt; date -u >> $R/times.txt
OUT=$R/table BENCH_S=170 timeout 180 ci/gpu/h200-session.sh cold-bench > $R/table/cold-bench.out 2>&1
date -u >> $R/times.txt
m="smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,dram__bytes_read.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
for bs in "1 2048" "1 32768"; do set -- $bs
  timeout 60 ncu --clock-control none -k "regex:fa_decode_mma" -c 1 --section SpeedOfLight --metrics "$m" python3 ci/gpu/probe.py $1 $2 > $R/ncu/ncu_$1_$2.txt 2>&1; echo "ncu $1 $2 rc=$?" >> $R/times.txt
done
date -u >> $R/times.txt; cat $R/times.txt; tail -25 $R/perf_compare.log; tail -9 $R/table/cold-bench.out
for f in $R/ncu/*.txt; do echo "=== $f"; grep -E "Duration|smsp__|l1tex__|dram__" $f | cut -c1-150; done
tar -czf $OUT/call70.tgz -C $OUT r && rm -rf $R
