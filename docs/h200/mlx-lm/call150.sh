#!/usr/bin/env bash
# Call 150 (after three calls carried .gpu/p1-p3; this one carries p4 and installs): the
# integration's tests with --backend cuda after the float32 prompt bound was set from call 148's
# margins; then where a decode step's time goes, each step built and then evaluated apart
# (`--parts`), at B = 1 and 8, 2048 keys.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
timeout 150 python3 -m pytest tests/parity/test_mlx_lm_models.py --backend cuda -q -p no:cacheprovider \
  > $OUT/tests.log 2>&1; echo "tests rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 150 python3 ci/gpu/mlx_lm_decode.py --parts --batch 1 8 --context 2048 32768 --rounds 2 \
  --json $OUT/parts.json > $OUT/parts.log 2>&1
echo "parts rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -3 $OUT/tests.log; cat $OUT/parts.log $OUT/times.txt
