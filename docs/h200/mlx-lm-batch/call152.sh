#!/usr/bin/env bash
# Call 152 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: both mlx_lm integration test files with --backend cuda (test_mlx_lm_batched.py is new:
# a BatchKVCache's left padding passed as key ranges), then a Llama-3-8B-shaped model decoding
# left-padded batches (`--padded`): mlx_lm, patched with key ranges, patched with the mask.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 200 python3 -m pytest tests/parity/test_mlx_lm_models.py tests/parity/test_mlx_lm_batched.py --backend cuda \
  -q -p no:cacheprovider > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 170 python3 ci/gpu/mlx_lm_decode.py --padded --batch 8 --context 2048 8192 32768 --json $OUT/padded8.json \
  > $OUT/padded8.log 2>&1; echo "padded8 rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 150 python3 ci/gpu/mlx_lm_decode.py --padded --batch 32 --context 2048 8192 --json $OUT/padded32.json \
  > $OUT/padded32.log 2>&1; echo "padded32 rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -3 $OUT/tests.log; cat $OUT/padded8.log $OUT/padded32.log $OUT/times.txt
