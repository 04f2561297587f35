#!/usr/bin/env bash
# Call 154, right after 153: key ranges against the mask at the attention level (why the padded
# decode of call 152 read alike), and the padded decode again, each step built and evaluated apart.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
for shape in "8 2048" "8 8192" "8 32768" "32 2048" "32 8192"; do
  timeout 60 python3 docs/h200/mlx-lm-batch/ranges_vs_mask.py $shape >> $OUT/ranges.log 2>&1
done; echo "ranges rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 200 python3 ci/gpu/mlx_lm_decode.py --padded --parts --batch 8 --context 2048 32768 --rounds 2 \
  --json $OUT/parts8.json > $OUT/parts8.log 2>&1; echo "parts8 rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
cat $OUT/ranges.log $OUT/parts8.log $OUT/times.txt
