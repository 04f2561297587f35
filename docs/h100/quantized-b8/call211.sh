#!/usr/bin/env bash
# Call 211 (2026-12-05), right after call 210 on the same machine: the kernels of the 32-layer
# model's rounds, steps as generate_step takes them (docs/h100/quantized-steps/kernels.py with
# LAYERS=32), mlx_lm's own attention over a bf16 cache profiled too (PEERS=1): B = 8, then B = 1.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ROUND=generate LAYERS=32 PEERS=1
python3 -c 'import mlx.core' || exit 4
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
for b in 8 1; do
  B=$b timeout 250 python3 docs/h100/quantized-steps/kernels.py > $OUT/kernels-B$b.log 2>&1; echo "rc=$?" >> $OUT/kernels-B$b.log
  mkdir -p $OUT/traces-B$b && mv $OUT/*.json $OUT/traces-B$b/ 2>/dev/null
  date -u >> $OUT/times.txt
done
cd $OUT && tar -czf traces.tar.gz traces-B* && rm -rf traces-B*
grep -h "^## \|^B = \|^rc=" kernels-B*.log
