#!/usr/bin/env bash
# Call 148 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: the integration's tests with --backend cuda again (prefill now MLX's SDPA, a quantized
# cache dequantized for it), the logit margins, the Llama-3-8B-shaped decode speed (now with
# attention skipped as a third column). Call 149 follows with the suites.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
timeout 150 python3 -m pytest tests/parity/test_mlx_lm_models.py --backend cuda -q -p no:cacheprovider \
  > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 120 python3 docs/h200/mlx-lm/logit_margins.py cuda > $OUT/margins.log 2>&1
echo "margins rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 200 python3 ci/gpu/mlx_lm_decode.py --json $OUT/decode.json > $OUT/decode.log 2>&1
echo "decode rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -3 $OUT/tests.log; cat $OUT/margins.log $OUT/decode.log $OUT/times.txt
