#!/usr/bin/env bash
# What a GPU session runs on the H200 (docs/gpu.md), results under $OUT. MLX's CUDA build must
# already be installed (shared/gpu/stage-mlx-cuda.sh; see README.md).
#   ci/gpu/h200-session.sh verify   the suites with --backend cuda, then compute-sanitizer
#                                   memcheck and racecheck over the parity grids A and Q
#   ci/gpu/h200-session.sh perf     H200 perf baselines (tests/perf), the benchmark table and plot,
#                                   the layer-axis timing
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
OUT=${OUT:-$PWD/gpu-results}; mkdir -p "$OUT"
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.device_info().get("device_name"))' | tee -a "$OUT/env.txt"
date -u | tee -a "$OUT/env.txt"
grid=(tests/parity/test_grids.py::test_grid_a_decode_guard tests/parity/test_quantized_peers.py::test_quantized_vs_oracle)
case "${1:-}" in
  verify)
    # -v: one line per finished test, so a run cut by the time limit still says what passed.
    # Hypothesis examples are slow on CUDA (new shapes compile new kernel variants): property last.
    timeout "${SUITE_S:-330}" python3 -m pytest tests/kernels tests/parity tests/property --backend cuda -n 15 \
      -v -p no:cacheprovider -rf --tb=line -W ignore::pytest_benchmark.logger.PytestBenchmarkWarning \
      > "$OUT/suite.log" 2>&1; echo "suite rc=$?" >> "$OUT/suite.log"
    grep -oE "(PASSED|FAILED|ERROR) tests/[a-z]+" "$OUT/suite.log" | sort | uniq -c; tail -2 "$OUT/suite.log"
    for tool in memcheck racecheck; do
      timeout "${SANITIZER_S:-110}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
        python3 -m pytest "${grid[@]}" --backend cuda -v -p no:cacheprovider > "$OUT/$tool.log" 2>&1
      echo "$tool rc=$?" >> "$OUT/$tool.log"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|rc=" "$OUT/$tool.log" | tail -4
    done ;;
  perf)
    timeout "${PERF_S:-200}" ci/perf.sh record --backend cuda > "$OUT/perf_record.log" 2>&1; echo "perf rc=$?" | tee -a "$OUT/perf_record.log"
    tar -C tests/perf/baselines -cf "$OUT/baselines.tar" .
    timeout "${BENCH_S:-150}" python3 -m fusedattend bench --B 1,8,32 --S 512,2048,8192,32768 --formats bfloat16,q4 \
      --backends cuda --inner 20 --repeats 5 --budget 1.5 --json "$OUT/bench.json" --plot "$OUT/bench.png" > "$OUT/bench.log" 2>&1
    tail -40 "$OUT/bench.log"
    timeout 60 python3 ci/gpu/layer_axis.py ;;
  *) echo "usage: ci/gpu/h200-session.sh verify|perf" >&2; exit 2 ;;
esac
