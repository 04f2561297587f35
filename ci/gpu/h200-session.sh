#!/usr/bin/env bash
# What a GPU session ran on the H200 (docs/gpu.md): the suites with --backend cuda, the benchmark
# sweep and the layer-axis timing, results under $OUT. MLX's CUDA build must already be installed
# (shared/gpu/stage-mlx-cuda.sh; see CONTRIBUTING in README.md).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
OUT=${OUT:-$PWD/gpu-results}; mkdir -p "$OUT"
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.device_info().get("device_name"))' | tee "$OUT/env.txt"
date -u | tee -a "$OUT/env.txt"
python3 -m pytest tests/kernels tests/property tests/parity --backend cuda -n 14 -q -p no:cacheprovider -rf --tb=line 2>&1 | tail -60 > "$OUT/suite.log"
python3 -m fusedattend bench --B 1,8,32 --S 512,2048,8192,32768 --formats bfloat16,q4 --backends cuda \
  --inner 20 --repeats 5 --budget 1.5 --json "$OUT/bench.json" --plot "$OUT/bench.png" > "$OUT/bench.log" 2>&1
python3 ci/gpu/layer_axis.py
