#!/usr/bin/env bash
# Perf baselines per chip (docs/perf.md).
#   ci/perf.sh record    time tests/perf on this machine and save a new baseline for its chip
#   ci/perf.sh compare   time again and fail on a median regression beyond $PERF_FAIL (default 25%, 50% on cpu-* chips)
# Extra arguments go to pytest (e.g. --backend cpu, -k bfloat16).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"; shift || true
chip="$(python -m fusedattend.chip)"
# Shared CPU runners are noisy (2x swings measured under load): a wider default there.
case "$chip" in cpu-*) default_fail=50% ;; *) default_fail=25% ;; esac
storage="tests/perf/baselines/${chip}"
common=(tests/perf -m perf -p no:xdist -q "--benchmark-storage=file://${storage}" --benchmark-columns=median,iqr,rounds)
case "$mode" in
  record)  exec python -m pytest "${common[@]}" --benchmark-save="${chip}" "$@" ;;
  compare) exec python -m pytest "${common[@]}" --benchmark-compare "--benchmark-compare-fail=median:${PERF_FAIL:-$default_fail}" "$@" ;;
  *) echo "usage: ci/perf.sh {record|compare} [pytest args]" >&2; exit 2 ;;
esac
