#!/usr/bin/env bash
# Call 210 (2026-12-05), after staging, asked of the H200 (an H100 came): (1) the four host-bound 4-bit rows at S = 64
# that H200 baseline 0040 read 1.33-1.63x slower than 0039, timed twice; (2) the 32-layer model
# generating at B = 1 and 8 (call 208 read 19.15 ms a token over a 4-bit cache against 8.66 over
# a bf16 one at B = 8), then at B = 8 with MLX's CUDA graph cache at 1000 graphs (default 100).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
for n in 1 2; do
  timeout 120 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda -k "S64 and q4 and loop" \
    --benchmark-columns=median,iqr,rounds --benchmark-json=$OUT/s64-$n.json > $OUT/s64-$n.log 2>&1
  echo "s64 run $n rc=$?"; tail -1 $OUT/s64-$n.log
done
date -u >> $OUT/times.txt
timeout 200 python3 ci/gpu/mlx_lm_decode.py --batch 1 8 --context 8192 --rounds 3 2>&1 | tee $OUT/decode.log
date -u >> $OUT/times.txt
MLX_CUDA_GRAPH_CACHE_SIZE=1000 timeout 120 python3 ci/gpu/mlx_lm_decode.py --batch 8 --context 8192 --rounds 3 2>&1 \
  | tee $OUT/decode-graphs1000.log
date -u >> $OUT/times.txt
