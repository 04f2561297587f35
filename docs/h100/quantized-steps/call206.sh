#!/usr/bin/env bash
# Call 206 (2026-12-05), MLX staged: is call 205's cudaGraphInstantiate in every queued 4-bit round
# MLX's graph cache (MLX_CUDA_GRAPH_CACHE_SIZE, 100 graphs of up to 20 ops by default) too small
# for a round? steps.py at B = 1 and a 32-layer model (ci/gpu/mlx_lm_decode.py), each with the
# default and with a cache of 1000 graphs, the default again last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 BATCHES=1
python3 -c 'import mlx.core' || exit 3; date -u > $OUT/times.txt
for size in default 1000 default; do
  if [ $size = default ]; then unset MLX_CUDA_GRAPH_CACHE_SIZE; else export MLX_CUDA_GRAPH_CACHE_SIZE=$size; fi
  echo "## graph cache: $size" | tee -a $OUT/steps.log
  timeout 120 python3 docs/h100/quantized-steps/steps.py 2>&1 | tee -a $OUT/steps.log
done
for size in default 1000; do
  if [ $size = default ]; then unset MLX_CUDA_GRAPH_CACHE_SIZE; else export MLX_CUDA_GRAPH_CACHE_SIZE=$size; fi
  echo "## graph cache: $size" | tee -a $OUT/decode.log
  timeout 150 python3 ci/gpu/mlx_lm_decode.py --batch 1 --context 8192 --rounds 3 2>&1 | tee -a $OUT/decode.log
done
date -u >> $OUT/times.txt
