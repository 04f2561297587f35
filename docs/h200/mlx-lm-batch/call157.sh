#!/usr/bin/env bash
# Call 157, right after 156 on the same machine (run as one command line): the B = 1 decode of
# the Llama-3-8B-shaped model again, queued, 5 rounds.
PYTHONPATH=$PWD timeout 200 python3 ci/gpu/mlx_lm_decode.py --batch 1 --context 2048 32768 --rounds 5 \
  --json $OUT/decode1.json > $OUT/decode1.log 2>&1
