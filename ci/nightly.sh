#!/usr/bin/env bash
# The nightly perf run on this chip: time tests/perf, compare with the chip's newest baseline
# (tests/perf/baselines/<chip>/, `python -m fusedattend.chip`) by the project's rules, and write
# a summary, a JSON and a plot. On a chip with no baseline it records the first one.
#   ci/nightly.sh                        every perf row of this chip's default backend
#   NIGHTLY_SUBSET=small ci/nightly.sh   test_decode at B = 1 (about a minute on a CPU)
#   ci/nightly.sh -k bfloat16            arguments are pytest options (-k, --backend)
# Exits 0 (within limits, or a first baseline), 1 (a regression), 2 (setup). The steps, the
# environment (NIGHTLY_OUT, NIGHTLY_PASSES, PERF_FAIL, ...) and the outputs: ci/nightly.py, docs/ci.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python ci/nightly.py "$@"
