#!/usr/bin/env bash
# Call 201 (2026-12-05, NVIDIA H100 80GB HBM3), in the lease of call 200, MLX staged: the perf
# baselines (tests/perf) and the two benchmark tables, as on the H200. The perf record failed
# (out of memory, below); call202.sh is the same after the fix.
python3 -c 'import mlx.core' || exit 3; export PYTHONPATH=$PWD; python3 -m fusedattend.chip
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv; date -u
PERF_S=230 BENCH_S=170 bash ci/gpu/h200-session.sh perf 2>&1 | tail -30
OUT=$OUT/cold BENCH_S=170 bash ci/gpu/h200-session.sh cold-bench 2>&1 | tail -25; date -u
