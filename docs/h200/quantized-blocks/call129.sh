#!/usr/bin/env bash
# Call 129: 4-bit split blocks longer than 1024 keys at S = 16384 and 32768 (block_keys'
# TARGET_BLOCKS / MAX_BLOCK as a sweep's variants), chained and cold, then queued and cold.
# At S = 32768 plain bf16 keep their 2048-key blocks in every variant (PLAIN_LONGER_BLOCK), so
# their column is a control there; at S = 16384 MAX_BLOCK moves plain bf16's blocks too.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ci/gpu/schedule_sweep.py > $OUT/md5.txt
export SWEEP_SHAPES=1x16384,8x16384,32x16384,1x32768,8x32768,32x32768 SWEEP_COLD_MB=200
for chain in 1 0; do
  mkdir -p $OUT/chain$chain
  OUT=$OUT/chain$chain SWEEP_CHAIN=$chain SWEEP_ROUNDS=5 timeout 240 python3 ci/gpu/schedule_sweep.py \
    '{}' '{"TARGET_BLOCKS": 16, "MAX_BLOCK": 2048}' '{"TARGET_BLOCKS": 8, "MAX_BLOCK": 4096}' 2>&1 \
    | grep -v -i warn | tee $OUT/chain$chain/sweep.log
  date -u >> $OUT/times.txt
done
cat $OUT/times.txt
