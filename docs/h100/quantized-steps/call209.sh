#!/usr/bin/env bash
# Call 209 (2026-12-05), after staging: kernels.py at B = 8 with steps taken as generate_step
# takes them, where a 32-layer model over a 4-bit cache took 19.15 ms a token against 8.66 over
# a bf16 one on the H200 (call 208).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 B=8 ROUND=generate
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
timeout 200 python3 docs/h100/quantized-steps/kernels.py > $OUT/kernels.log 2>&1; echo "rc=$?" >> $OUT/kernels.log
cd $OUT && tar -czf traces.tar.gz *.json && rm -f *.json; date -u >> $OUT/times.txt
grep -A12 "^## \|^B = " $OUT/kernels.log | cut -c1-100,170-215
