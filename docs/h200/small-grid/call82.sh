#!/usr/bin/env bash
# What a B = 1 launch's grid can read (ci/gpu/small_grid_bandwidth.py), and how torch's SDPA launches at
# B = 1 against ours (Nsight Compute launch statistics, S = 2048 and 32768).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; git rev-parse HEAD > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R timeout 240 python3 ci/gpu/small_grid_bandwidth.py > $R/small_grid.log 2>&1; echo "rc=$?" >> $R/times.txt
date -u >> $R/times.txt
cat > $R/torch_probe.py <<'PY'
import sys, torch, torch.nn.functional as F
S = int(sys.argv[1])
q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 8, S, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(1, 8, S, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
PY
sections="--section LaunchStats --section SpeedOfLight --section Occupancy"
m="gpu__time_duration.sum,dram__bytes_read.sum,smsp__inst_executed.sum,smsp__warps_active.avg.per_cycle_active"
m="$m,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed_op_ldgsts.sum"
for S in 2048 32768; do
  timeout 100 ncu --clock-control none $sections --metrics "$m" python3 $R/torch_probe.py $S > $R/ncu_torch_1_$S.txt 2>&1; echo "torch $S rc=$?" >> $R/times.txt
  timeout 100 ncu --clock-control none -k regex:fa_ -c 2 $sections --metrics "$m" python3 ci/gpu/probe.py 1 $S > $R/ncu_ours_1_$S.txt 2>&1; echo "ours $S rc=$?" >> $R/times.txt
done
date -u >> $R/times.txt; cat $R/times.txt
grep -v '^\[W' $R/small_grid.log | python3 -c '
import sys, json
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
for r in rows:
    print(r.get("mb"), r.get("form"), r.get("depth"), r.get("grid"), r.get("us"), r.get("GBs"), r.get("error", ""))'
for f in $R/ncu_*.txt; do echo "=== $f"; grep -E '^  [a-zA-Z_].*\(|Duration|Grid Size|Block Size|Registers Per|Shared Memory Configuration Size|Dynamic Shared|Static Shared|Achieved Occupancy|Waves Per SM|gpu__time|dram__bytes|inst_executed|warps_active|long_scoreboard|l1tex__t_' $f | sed 's/  */ /g' | cut -c1-120; done
tar -czf $OUT/call82.tgz -C $OUT r && rm -rf $R
