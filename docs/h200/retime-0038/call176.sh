#!/usr/bin/env bash
# Call 176, right after 175 (run as one command line): call 175's first step, the two test files
# of 7806a3a's fixture with --backend cuda, had hit its 60 s limit (the kernels' first NVRTC
# builds in a fresh process); the same files with a longer limit.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; date -u; timeout 400 python3 -m pytest -q -p no:cacheprovider --backend cuda tests/test_key_ranges_check.py tests/parity/test_mlx_lm_batched.py --durations=8 > $OUT/fixture_tests.log 2>&1; echo "rc=$?"; tail -15 $OUT/fixture_tests.log; date -u
