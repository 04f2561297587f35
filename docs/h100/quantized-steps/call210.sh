#!/usr/bin/env bash
# Call 210 (written 2026-12-05, NOT RUN: the session's device time ran out), after staging: the
# kernels of the 32-layer model at B = 8, steps as generate_step takes them, where a 4-bit cache
# took 19.15 ms a token against 8.66 over a bf16 one on the H200 (call 208).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 B=8 ROUND=generate LAYERS=32
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
timeout 400 python3 docs/h100/quantized-steps/kernels.py > $OUT/kernels.log 2>&1; echo "rc=$?" >> $OUT/kernels.log
cd $OUT && tar -czf traces.tar.gz *.json && rm -f *.json; date -u >> $OUT/times.txt
grep -A12 "^## \|^B = " $OUT/kernels.log | cut -c1-100,170-215
