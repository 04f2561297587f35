#!/usr/bin/env bash
# Call 220 (2026-12-06 06:13 UTC, right after call 219 on the same H100; typed as one command line,
# kept here as it ran): issue 5's cold table with MLX's CUDA graphs off (MLX_USE_CUDA_GRAPHS=0),
# then on, 100 samples a shape (BENCH_S); both tables in tables.tgz.
export PYTHONPATH=$PWD
for run in nographs graphs; do
  e=(); [[ $run == nographs ]] && e=(MLX_USE_CUDA_GRAPHS=0)
  env "${e[@]}" OUT=$OUT/table_$run BENCH_S=100 ci/gpu/h200-session.sh cold-bench > $OUT/cold_$run.out 2>&1
  tail -8 $OUT/cold_$run.out
done
cd $OUT && tar czf tables.tgz table_* && rm -rf table_*
