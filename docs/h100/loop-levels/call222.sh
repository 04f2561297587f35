#!/usr/bin/env bash
# Call 222 (2026-12-06 06:28 UTC, a fourth H100 lease, again asked as an H200; typed as one command
# line after staging, kept here as it ran): the host's CPU, then loop_levels.py in six processes,
# CUDA graphs on and off in turn, 15 samples a B; the JSONs in levels.tgz.
export PYTHONPATH=$PWD
(lscpu; grep MHz /proc/cpuinfo | sort | uniq -c) > $OUT/cpu.txt; grep -E "Model name|MHz" $OUT/cpu.txt | head -2
mkdir -p $OUT/l
for r in on_1 off_1 on_2 off_2 on_3 off_3; do
  e=(); [[ $r == off* ]] && e=(MLX_USE_CUDA_GRAPHS=0)
  env "${e[@]}" OUT=$OUT/l timeout 40 python3 ci/gpu/loop_levels.py --samples 15 --label $r 2>&1 | tee -a $OUT/levels.log | cut -c1-80
done
cd $OUT && tar czf levels.tgz l && rm -rf l
