#!/usr/bin/env bash
# What a GPU session runs on the H200 (docs/gpu.md), results under $OUT. MLX's CUDA build must
# already be installed (shared/gpu/stage-mlx-cuda.sh; see README.md).
#   ci/gpu/h200-session.sh verify     the suites with --backend cuda (property first: its
#                                     Hypothesis tests are the longest; SUITE_TESTS picks)
#   ci/gpu/h200-session.sh sanitize   compute-sanitizer memcheck and racecheck over the parity
#                                     grids A, Q and B, the pinned quantized layouts and the
#                                     schedule tests of plain K/V on decode_mma.metal and the
#                                     key_ranges tests (SANITIZER_SETS, SANITIZER_TOOLS pick:
#                                     initcheck and synccheck too, and the property suite on
#                                     drawn cases, set random; SANITIZER_PARALLEL=1 runs them
#                                     side by side, random as one process a property file)
#   ci/gpu/h200-session.sh profile    the schedule sweep, Nsight Compute counters of each decode
#                                     kernel and MLX's at two shapes, per-call overhead, the layer axis
#   ci/gpu/h200-session.sh perf       H200 perf baselines (tests/perf), the benchmark table and plot
#   ci/gpu/h200-session.sh cold       schedule sweeps as a decode step sees it (docs/h200/journal.md): K/V
#                                     out of L2, calls one after the other; one block or split
#                                     (gpu.SINGLE_PASS_MAX_S), then the split path's schedule
#   ci/gpu/h200-session.sh cold-bench the benchmark table with K/V that is not in L2
#   ci/gpu/h200-session.sh chain-bench the same, each call's query the previous call's output
# MLX caches compiled kernels on disk by kernel name only (MLX_PTX_CACHE_DIR). gpu._kernel's names
# carry a digest of the source (so a user's cache cannot serve an edited kernel's older build
# either); a directory per version of metal/ also keeps each session's compile times its own.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)}
OUT=${OUT:-$PWD/gpu-results}; mkdir -p "$OUT"
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.device_info().get("device_name"))' | tee -a "$OUT/env.txt"
date -u | tee -a "$OUT/env.txt"
# The sanitizers' grids: A and Q (S <= 300: one block), and B (S up to 2000: split blocks and merge);
# then the pinned quantized edges of the property suite (HYPOTHESIS_PROFILE=pinned), whose
# layouts include arrays the matrix kernel reads with 64-bit offsets (strategies.quantized_layout).
# Grid B runs apart, with a time limit of its own: in one run with A and Q, memcheck reached
# the limit inside B and needed a second device call for the rest (docs/h200/merge32/).
grid=(tests/parity/test_grids.py::test_grid_a_decode_guard tests/parity/test_quantized_peers.py::test_quantized_vs_oracle)
grid_b=(tests/parity/test_grids.py::test_grid_b_mlx_decode_shapes)
pinned_layouts=(tests/property/test_online_softmax_parity.py::test_quantized_matches_oracle
                tests/property/test_batch_invariance.py::test_quantized_batch_equals_per_request)
# Plain K/V take decode_mma.metal's split blocks only in 1024-key blocks (S > 512; 2048 from
# S = 32768): the schedule tests' "split_mma" path gives them blocks of any length, and its
# block edges reach S = 32769 (test_block_edges, test_block_edges_weigh_much). The grids' 4-bit cases
# take one block; test_quantized_block_edges (S = 4097) splits them, and test_quantized_scale_layouts
# reads scales the packed loads cannot take (test_quantized_group_counts: 1, 3 and 4 groups a row);
# test_quantized_staged_tiles_... splits short and long blocks with staged tiles (cp.async) and without.
split_mma=(tests/kernels/test_gpu_schedule.py -k "split_mma or quantized_block_edges or quantized_scale_layouts or quantized_group_counts or staged_tiles")
# Per-request key ranges as each call passes them (none of the grids above has any): blocks left
# empty, replays with new values, views of wider arrays, and the refused values (6e60b02).
key_ranges=(tests/kernels/test_gpu_schedule.py tests/test_replay.py tests/test_api.py -k key_ranges)
# Opt-in (SANITIZER_SETS=random): the property suite under HYPOTHESIS_PROFILE=sanitize, its pinned
# cases and 3 x factor cases drawn afresh each run (shapes, strided and quantized layouts, masks,
# key ranges, the layer axis), where every set above is fixed. SANITIZER_RANDOM_TESTS narrows it
# (pytest arguments, split at spaces). In one process it takes more than 540 s under any tool
# (docs/h200/more-sanitizers/), so SANITIZER_PARALLEL=1 gives each property file a process
# of its own (logs TOOL-random-FILE.log); its longest file, test_batch_invariance.py, took 182 s.
# shellcheck disable=SC2206
random_cases=(${SANITIZER_RANDOM_TESTS:-tests/property})
# sanitized LOG SECONDS TESTS...: the tests under compute-sanitizer --tool $tool, into $OUT/LOG.log.
# SANITIZER_OPTIONS go to compute-sanitizer as they are: initcheck needs "--check-api-memory-access
# no", or MLX's own copies of whole buffers (CudaAllocator::move_to_unified_memory's cudaMemcpy
# of bytes no one wrote) fill its report (docs/h200/more-sanitizers/).
sanitized() {
  local log=$1 seconds=$2; shift 2
  # shellcheck disable=SC2086
  timeout "$seconds" compute-sanitizer --tool "$tool" ${SANITIZER_OPTIONS:-} --error-exitcode 99 \
    python3 -m pytest "$@" --backend cuda -v -p no:cacheprovider > "$OUT/$log.log" 2>&1
  echo "$tool rc=$?" >> "$OUT/$log.log"
  # prefixed with the log's name: under SANITIZER_PARALLEL=1 the processes' lines interleave
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|rc=" "$OUT/$log.log" | tail -4 | sed "s|^|$log: |"
  grep -E "Race reported" "$OUT/$log.log" | sort | uniq -c | sed "s|^|$log: |"
}
# The benchmark table of docs/gpu.md (issue 5's shapes, peers in the same run) into $OUT/NAME.*:
# bench_table NAME SECONDS [more bench options]
bench_table() {
  local name=$1 seconds=$2; shift 2
  timeout "$seconds" python3 -m fusedattend bench --B 1,8,32 --S 512,2048,8192,32768 --formats bfloat16,q4 \
    --backends cuda --inner 20 --repeats 5 --budget 1.5 "$@" --json "$OUT/$name.json" --plot "$OUT/$name.png" \
    > "$OUT/$name.log" 2>&1
  tail -40 "$OUT/$name.log"
  # issue 5's table and targets from the same run (docs/gpu.md, "Speed against issue 5's targets")
  if [[ -s "$OUT/$name.json" ]]; then
    python3 ci/bench_targets.py "$OUT/$name.json" | tee "$OUT/$name-targets.md" | tail -8
  fi
}
case "${1:-}" in
  verify)
    # -v: one line per finished test, so a run cut by the time limit still says what passed.
    # worksteal: an idle worker takes queued tests from a busy one (the long Hypothesis tests);
    # --timeout (pytest-timeout): a test still running after it fails with its stack.
    extra=(); python3 -m pytest --help | grep -q worksteal && extra+=(--dist worksteal)
    python3 -m pytest --help | grep -q -- "--timeout=" && extra+=(--timeout "${TEST_S:-400}")
    timeout "${SUITE_S:-540}" python3 -m pytest ${SUITE_TESTS:-tests/property tests/kernels tests/parity} --backend cuda -n 15 "${extra[@]}" \
      -v -p no:cacheprovider -rf --tb=short --durations=12 -W ignore::pytest_benchmark.logger.PytestBenchmarkWarning \
      > "$OUT/suite.log" 2>&1; echo "suite rc=$?" >> "$OUT/suite.log"
    grep -oE "(PASSED|FAILED|ERROR) tests/[a-z]+" "$OUT/suite.log" | sort | uniq -c; tail -2 "$OUT/suite.log" ;;
  sanitize)
    # MLX's SDPA peer runs on the CPU stream (FUSEDATTEND_PEERS_ON_CPU=1): on the GPU its cuDNN /
    # cuBLAS kernels (nvjet_*) drew racecheck reports of their own (docs/h200/mma/). Narrowing
    # racecheck with --kernel-name or --kernel-name-exclude made the sanitizer fail with an
    # internal error on the H200 (docs/h200/scatter/). Look for fa_ in the log.
    # SANITIZER_SETS picks the test sets (default: all five). SANITIZER_PARALLEL=1 runs every
    # (tool, set) at once, each its own process: memcheck and racecheck over grid_b and split_mma
    # took 3 min 35 s side by side (docs/h200/tip-f77cc62/), split_mma's memcheck alone 123 s (08:19).
    # On a fresh machine (MLX_PTX_CACHE_DIR empty) racecheck over split_mma ran past 290 s beside
    # the others (59% done, docs/h200/tip-248db26/call139/); after a verify step of tests/kernels
    # in the same lease it took 234 s (SANITIZER_MMA_S=520, docs/h200/tip-1069d28/call143/).
    sanitize_set() {  # sanitize_set TOOL SET (sanitized reads $tool)
      local tool=$1
      case $2 in
        grid) FUSEDATTEND_PEERS_ON_CPU=1 sanitized "$tool" "${SANITIZER_S:-200}" "${grid[@]}" ;;
        grid_b) FUSEDATTEND_PEERS_ON_CPU=1 sanitized "$tool-grid-b" "${SANITIZER_B_S:-150}" "${grid_b[@]}" ;;
        layouts) HYPOTHESIS_PROFILE=pinned sanitized "$tool-layouts" "${SANITIZER_PINNED_S:-150}" "${pinned_layouts[@]}" ;;
        # memcheck over split_mma: 123 s alone (08:19), past 120 s beside the suites (08:07).
        split_mma) FUSEDATTEND_PEERS_ON_CPU=1 sanitized "$tool-split-mma" "${SANITIZER_MMA_S:-200}" "${split_mma[@]}" ;;
        key_ranges) sanitized "$tool-key-ranges" "${SANITIZER_RANGES_S:-150}" "${key_ranges[@]}" ;;
        random)
          if [[ ${SANITIZER_PARALLEL:-0} == 1 && -z ${SANITIZER_RANDOM_TESTS:-} ]]; then
            for file in tests/property/test_*.py; do
              HYPOTHESIS_PROFILE=sanitize sanitized "$tool-random-$(basename "$file" .py)" "${SANITIZER_RANDOM_S:-400}" "$file" &
            done
            wait
          else
            HYPOTHESIS_PROFILE=sanitize sanitized "$tool-random" "${SANITIZER_RANDOM_S:-400}" "${random_cases[@]}"
          fi ;;
      esac
    }
    for set in ${SANITIZER_SETS:-}; do
      [[ " grid grid_b layouts split_mma key_ranges random " == *" $set "* ]] || { echo "unknown sanitizer set: $set (grid, grid_b, layouts, split_mma, key_ranges, random)" >&2; exit 2; }
    done
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck}; do
      for set in ${SANITIZER_SETS:-grid grid_b layouts split_mma key_ranges}; do
        if [[ ${SANITIZER_PARALLEL:-0} == 1 ]]; then sanitize_set "$tool" "$set" & else sanitize_set "$tool" "$set"; fi
      done
    done
    wait ;;
  profile)
    timeout "${SWEEP_S:-150}" python3 ci/gpu/schedule_sweep.py ${SWEEP_VARIANTS:-'{}'} > "$OUT/sweep.log" 2>&1; cat "$OUT/sweep.log"
    metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
    for shape in "1 2048" "32 32768"; do
      timeout 120 ncu --clock-control none -k "regex:fa_|sdpa|attention" --metrics "$metrics" --csv python3 ci/gpu/probe.py $shape \
        > "$OUT/ncu_${shape// /_}.csv" 2>&1
      python3 ci/gpu/ncu_table.py "$OUT/ncu_${shape// /_}.csv"
    done
    timeout 60 python3 ci/gpu/overhead.py 1 2048; timeout 60 python3 ci/gpu/overhead.py 32 2048
    timeout 60 python3 ci/gpu/layer_axis.py ;;
  perf)
    timeout "${PERF_S:-200}" ci/perf.sh record --backend cuda > "$OUT/perf_record.log" 2>&1; echo "perf rc=$?" | tee -a "$OUT/perf_record.log"
    tar -C tests/perf/baselines -cf "$OUT/baselines.tar" .
    bench_table bench "${BENCH_S:-150}" ;;
  cold)
    # Caches out of L2 (SWEEP_COLD_MB of copies, read in turn), each call's query the previous
    # call's output (SWEEP_CHAIN=1: calls run one after the other, as a model's layers do; queued
    # independent calls overlap on the GPU and flatter launches of few threadgroups). First the
    # single-pass threshold, then the split path's schedule.
    export SWEEP_COLD_MB=${SWEEP_COLD_MB:-200} SWEEP_CHAIN=${SWEEP_CHAIN:-1}
    SWEEP_SHAPES=${SWEEP_SHAPES:-1x512,1x1024,1x2048,8x512,8x1024,8x2048,32x512,32x1024,32x2048} \
      timeout "${SWEEP_S:-300}" python3 ci/gpu/schedule_sweep.py '{"SINGLE_PASS_MAX_S": 0}' '{"SINGLE_PASS_MAX_S": 512}' \
      '{"SINGLE_PASS_MAX_S": 1024}' '{"SINGLE_PASS_MAX_S": 2048}' \
      > "$OUT/sweep-cold.log" 2>&1; cut -c1-150 "$OUT/sweep-cold.log"
    SWEEP_SHAPES=${SPLIT_SHAPES:-1x2048,1x32768,8x8192,32x2048,32x32768} \
      timeout "${SPLIT_SWEEP_S:-250}" python3 ci/gpu/schedule_sweep.py '{}' '{"SIMDGROUPS": 2}' '{"TARGET_BLOCKS": 64}' \
      '{"QUANTIZED_KEYS_IN_FLIGHT": 2}' > "$OUT/sweep-cold-split.log" 2>&1; cut -c1-150 "$OUT/sweep-cold-split.log" ;;
  cold-bench)
    bench_table bench-cold "${BENCH_S:-200}" --cold-mb "${SWEEP_COLD_MB:-200}" ;;
  chain-bench)
    bench_table bench-chain "${BENCH_S:-200}" --cold-mb "${SWEEP_COLD_MB:-200}" --chain ;;
  *) echo "usage: ci/gpu/h200-session.sh verify|sanitize|profile|perf|cold|cold-bench|chain-bench" >&2; exit 2 ;;
esac
