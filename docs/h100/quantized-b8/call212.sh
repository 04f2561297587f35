#!/usr/bin/env bash
# Call 212 (2026-12-05), after staging: MLX's CUDA graph cache and the 32-layer model's decode.
# MLX 0.32.4's CommandEncoder::commit (mlx/backend/cuda/device.cpp) keys each CUDA graph of up to
# 20 operations by its topology and drops *every* cached graph once it holds more than
# MLX_CUDA_GRAPH_CACHE_SIZE (default 100) keys. Processes alternate 100 and 1000 graphs:
# mlx_lm_decode.py at B = 1 and 8 (5 rounds), then kernels.py's profile at B = 8 with each, its
# graph API calls counted.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
for run in 1 2; do
  for g in 100 1000; do
    echo "# MLX_CUDA_GRAPH_CACHE_SIZE=$g, run $run"
    MLX_CUDA_GRAPH_CACHE_SIZE=$g timeout 150 python3 ci/gpu/mlx_lm_decode.py --batch 1 8 --context 8192 --rounds 5 \
      --json $OUT/decode-g$g-$run.json 2>&1 | tee $OUT/decode-g$g-$run.log | grep "^| [18] "
    date -u >> $OUT/times.txt
  done
done
for g in 100 1000; do
  MLX_CUDA_GRAPH_CACHE_SIZE=$g B=8 ROUND=generate LAYERS=32 timeout 150 python3 docs/h100/quantized-steps/kernels.py \
    > $OUT/kernels-B8-g$g.log 2>&1; echo "rc=$?" >> $OUT/kernels-B8-g$g.log
  echo "# kernels, MLX_CUDA_GRAPH_CACHE_SIZE=$g"; grep -h "^## \|^graph calls\|^rc=" $OUT/kernels-B8-g$g.log | cut -c1-400
  mkdir -p $OUT/traces-g$g; mv $OUT/*_*.json $OUT/traces-g$g/ 2>/dev/null
  date -u >> $OUT/times.txt
done
cd $OUT && tar -czf traces.tar.gz traces-g* && rm -rf traces-g*
