#!/usr/bin/env bash
# Call 165, right after 164 on the same lease: what a KeyRanges saves against a (B, 2) array read
# back every call, at the attention level (host_read.py) and in tests/perf's padded decode loop
# (padded_loop_cost.py), then perf baseline 0036 (its padded loop rows pass a KeyRanges a step).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py | sort -k2 > $OUT/md5.txt
for shape in "1 2048" "8 2048" "8 32768" "32 2048" "32 8192" "32 32768"; do
  timeout 60 python3 docs/h200/key-ranges/host_read.py attention $shape >> $OUT/attention.log 2>&1
done; echo "attention rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
for shape in "8 2048" "32 2048" "8 32768"; do
  PADDED_ROUNDS=7 PADDED_VARIANTS="made from Python each step|a KeyRanges|none" \
    timeout 90 python3 ci/gpu/padded_loop_cost.py $shape >> $OUT/loops.jsonl 2>> $OUT/loops.err
done; echo "loops rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 300 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
tail -3 $OUT/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $OUT/
python3 ci/baseline_table.py "$new" > $OUT/baseline_table.md
date -u >> $OUT/times.txt; cat $OUT/attention.log; python3 -c "
import json
for line in open('$OUT/loops.jsonl'):
    r = json.loads(line); print(r['B'], r['S'], r['key_ranges'][:60], r['step_wall_us'], r['all_kernels_us_a_step'])
"; cat $OUT/times.txt
