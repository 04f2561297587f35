#!/usr/bin/env bash
# Call 221 (2026-12-06 06:25 UTC, a third H100 lease, again asked as an H200; typed as one command
# line after staging, kept here as it ran): the host's CPU, then loop_levels.py in three
# processes, graphs on, off, on, 20 samples a B.
export PYTHONPATH=$PWD
(lscpu; grep MHz /proc/cpuinfo | sort | uniq -c) > $OUT/cpu.txt; grep -E "Model name|MHz" $OUT/cpu.txt | head -3
for r in default_1 nographs_1 default_2; do
  e=(); [[ $r == nographs* ]] && e=(MLX_USE_CUDA_GRAPHS=0)
  env "${e[@]}" timeout 60 python3 ci/gpu/loop_levels.py --samples 20 --label $r 2>&1 | tee -a $OUT/levels.log | cut -c1-100
done
