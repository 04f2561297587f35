#!/usr/bin/env bash
# Call 205 (2026-12-05), MLX staged (call 204's lease): kernels.py, the kernels of a queued round.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3; date -u > $OUT/times.txt
timeout 300 python3 docs/h100/quantized-steps/kernels.py > $OUT/kernels.log 2>&1; echo "rc=$?" >> $OUT/kernels.log
cd $OUT && tar -czf traces.tar.gz *.json && rm -f *.json; date -u >> $OUT/times.txt
grep -A14 "^## " $OUT/kernels.log | cut -c1-200
