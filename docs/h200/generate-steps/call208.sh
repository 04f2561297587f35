#!/usr/bin/env bash
# Call 208 (2026-12-05), after staging, on the H200: the perf record with the mlx_lm rows' steps
# taken as mlx_lm's generate_step takes them (H200 baseline 0040), then a 32-layer model
# generating over bf16 and 4-bit caches (ci/gpu/mlx_lm_decode.py), as call 206 did on an H100.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 300 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
grep -h "passed\|failed" $OUT/perf_record.log | tail -2
tar -C tests/perf/baselines -cf $OUT/baselines.tar nvidia-h200
timeout 200 python3 ci/gpu/mlx_lm_decode.py --batch 1 8 --context 8192 --rounds 3 2>&1 | tee $OUT/decode.log
date -u >> $OUT/times.txt
