#!/usr/bin/env bash
# Call 159 (run in the same device call as docs/h200/mlx-lm-perf/call158.sh, right after it):
# does the host's read of key_ranges each call cost the GPU time? host_read.py's variants, at the
# attention level, then in the 8B-shaped model's left-padded decode.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
for shape in "1 2048" "1 8192" "1 32768" "8 2048" "8 8192" "8 32768" "32 2048" "32 8192" "32 32768"; do
  timeout 60 python3 docs/h200/key-ranges/host_read.py attention $shape >> $OUT/attention.log 2>&1
done; echo "attention rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 200 python3 docs/h200/key-ranges/host_read.py model 8 2048 32768 > $OUT/model8.log 2>&1
echo "model8 rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 120 python3 docs/h200/key-ranges/host_read.py model 32 2048 > $OUT/model32.log 2>&1
echo "model32 rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
cat $OUT/attention.log $OUT/model8.log $OUT/model32.log $OUT/times.txt
