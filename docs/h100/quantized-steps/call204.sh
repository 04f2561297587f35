#!/usr/bin/env bash
# Call 204 (2026-12-05), after staging: steps.py, where a decode step over a 4-bit
# QuantizedKVCache spends its time (tests/perf's mlx_lm rows: 0.30x and 0.50x mlx_lm's bf16 step).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
which nsys ncu | tee -a $OUT/device_info.txt
timeout 400 python3 docs/h100/quantized-steps/steps.py 2>&1 | tee $OUT/steps.log
date -u >> $OUT/times.txt
