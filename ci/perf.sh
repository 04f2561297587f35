#!/usr/bin/env bash
# Perf baselines per chip (docs/testing.md, "The perf regression").
#   ci/perf.sh record    time tests/perf on this machine and save a new baseline for its chip
#   ci/perf.sh compare   time again and fail on a median regression (a call's) beyond $PERF_FAIL
#                        (default 25%, 50% on cpu-* chips), or beyond $PERF_HOST_FAIL (default 60%)
#                        on a GPU chip's host-bound rows (a baseline call under 75 us): fusedattend.benchmarks.perf_compare;
#                        rows that fail are timed once more, and fail the compare only if slow again
#                        (by their time, and against the peer timed beside them: the peer gauge);
#                        PERF_JSON=run.json keeps the run's pytest-benchmark JSON (the second
#                        timing's as run.again.json)
# Extra arguments go to pytest (e.g. --backend cpu, -k bfloat16).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"; shift || true
chip="$(python -m fusedattend.chip)"
# Shared CPU runners are noisy (2x swings measured under load): a wider default there, for every
# row. On a GPU the rows whose call is mostly the host's dispatch read up to 43% slower in runs
# of unchanged kernels on the H200, the others at most 11% slower (docs/decisions/perf-compare-thresholds.md).
case "$chip" in
  cpu-*) default_fail=50% host_fail=50% host_us=0 ;;
  *) default_fail=25% host_fail=60% host_us=75 ;;
esac
storage="tests/perf/baselines/${chip}"
# shellcheck disable=SC2054  # the commas are inside one argument
common=(tests/perf -m perf -p no:xdist -q "--benchmark-storage=file://${storage}" --benchmark-columns=median,iqr,rounds)
case "$mode" in
  record)  exec python -m pytest "${common[@]}" --benchmark-save="${chip}" "$@" ;;
  compare)
    # A row slow once may be the host's hiccup (a back-to-back run on the H200 read 2.6x at one
    # host-bound shape, IQR a third of its median); a regression is slow again.
    limits=(--fail "${PERF_FAIL:-$default_fail}" --host-bound-fail "${PERF_HOST_FAIL:-$host_fail}" --host-bound-us "$host_us")
    run_json="${PERF_JSON:-$(mktemp)}"; again_json="${run_json%.json}.again.json"; failed="$(mktemp)"
    python -m pytest "${common[@]}" "$@" "--benchmark-json=${run_json}"
    python -m fusedattend.benchmarks.perf_compare "$storage" "$run_json" "${limits[@]}" --failed "$failed" && exit 0
    [ -s "$failed" ] || exit 1
    echo "timing the slow rows again:"
    mapfile -t again < <(sed -e 's#^test_mlx_lm_step#tests/perf/test_mlx_lm_perf.py::&#' \
      -e '/^tests\//!s#^#tests/perf/test_decode_perf.py::#' "$failed")
    python -m pytest "${again[@]}" "${common[@]:1}" "$@" "--benchmark-json=${again_json}"
    exec python -m fusedattend.benchmarks.perf_compare "$storage" "$again_json" "${limits[@]}" ;;
  *) echo "usage: ci/perf.sh {record|compare} [pytest args]" >&2; exit 2 ;;
esac
