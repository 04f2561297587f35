#!/usr/bin/env bash
# Call 166, a fresh lease: the kernels now read a negative second key_ranges word as a range that
# ends -(word + 1) keys before S (KeyRanges.from_padding, metal/ changed). The property and parity
# suites with --backend cuda, the key-range, API, replay, loop and compile files, then the padded
# loops' variants, queued and each step evaluated.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
SUITE_TESTS="tests/property tests/parity" SUITE_S=440 TEST_S=420 ci/gpu/h200-session.sh verify > $OUT/verify.log 2>&1
echo "verify rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_key_ranges_check.py tests/test_api.py tests/test_replay.py \
  tests/test_growing_loop.py tests/test_compile.py tests/kernels/test_growing_cache.py \
  --backend cuda > $OUT/files.log 2>&1
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gpu_schedule.py -k key_ranges --backend cuda >> $OUT/files.log 2>&1
echo "files rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
V="made from Python each step|a KeyRanges|one KeyRanges|none"
for shape in "8 2048" "32 2048" "8 32768"; do
  PADDED_ROUNDS=7 PADDED_VARIANTS="$V" timeout 60 python3 ci/gpu/padded_loop_cost.py $shape >> $OUT/loops.jsonl 2>> $OUT/loops.err
  PADDED_ROUNDS=7 PADDED_VARIANTS="$V" timeout 60 python3 ci/gpu/padded_loop_cost.py $shape --each-step >> $OUT/loops.jsonl 2>> $OUT/loops.err
done; echo "loops rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
tail -5 $OUT/verify.log; tail -3 $OUT/files.log; python3 -c "
import json
for line in open('$OUT/loops.jsonl'):
    r = json.loads(line); print(r['B'], r['S'], r['each_step'], r['key_ranges'][:60], r['step_wall_us'], r['all_kernels_us_a_step'])
"; cat $OUT/times.txt
