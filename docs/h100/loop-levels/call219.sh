#!/usr/bin/env bash
# Call 219 (2026-12-06), after staging MLX: call 218 found the short 4-bit loop faster with MLX's
# CUDA graphs off (MLX_USE_CUDA_GRAPHS=0). Here the perf suite's queued decode loops at S = 64 and
# 2048 (ours and MLX's SDPA, both formats) run with graphs on and off, in turn, twice each; then
# loop_levels.py once each way; with the host's CPU model beside them. levels.tgz comes back.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
R=$OUT/levels; mkdir -p $R; (lscpu; grep MHz /proc/cpuinfo | sort | uniq -c) > $R/cpu.txt; grep "Model name" $R/cpu.txt
for run in graphs_1 nographs_1 graphs_2 nographs_2; do
  env_set=(); [[ $run == nographs_* ]] && env_set=(MLX_USE_CUDA_GRAPHS=0)
  echo "$run start $(date -u +%H:%M:%S)" | tee -a $R/starts.txt
  env "${env_set[@]}" timeout 110 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda \
    -k "test_decode_loop and not each_step and not padded and (S64 or S2048)" --benchmark-columns=median,rounds \
    --benchmark-json=$R/perf_$run.json > $R/perf_$run.log 2>&1; echo "  rc=$?"
done
for run in graphs nographs; do
  env_set=(); [[ $run == nographs ]] && env_set=(MLX_USE_CUDA_GRAPHS=0)
  env "${env_set[@]}" OUT=$R timeout 60 python3 ci/gpu/loop_levels.py --samples 20 --label $run 2>&1 | tee -a $R/levels.log | cut -c1-110
done
python3 - $R <<'PY'
import json, sys
R = sys.argv[1]
runs = ["graphs_1", "nographs_1", "graphs_2", "nographs_2"]
data = {r: {b["name"]: b for b in json.load(open(f"{R}/perf_{r}.json"))["benchmarks"]} for r in runs}
for name in sorted(data[runs[0]]):
    cells = []
    for r in runs:
        b = data[r].get(name)
        if b:
            us = b["stats"]["median"] / b["extra_info"]["calls_per_round"] * 1e6
            cells.append(f"{us:6.1f} ({b['extra_info']['ratio_mx.fast.sdpa']:.2f}x)")
    print(name.replace("test_decode_loop", ""), " ".join(cells))
PY
tar -C $OUT -czf $OUT/levels.tgz levels && rm -rf $R
