#!/usr/bin/env bash
# Call 167, right after 166: compute-sanitizer memcheck and racecheck over three sets of
# ci/gpu/h200-session.sh sanitize (the parity grid, the key ranges, the layouts; not grid_b and
# split_mma, for device time) on the changed kernels, then the
# padded perf rows (one KeyRanges.from_padding a loop) against baseline 0036's.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
SANITIZER_SETS="grid key_ranges layouts" SANITIZER_PARALLEL=1 ci/gpu/h200-session.sh sanitize > $OUT/sanitize.log 2>&1
echo "sanitize rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
timeout 120 python3 -m pytest tests/perf -p no:xdist -p no:cacheprovider --backend cuda -q -k "padded" \
  --benchmark-json=$OUT/padded.json > $OUT/padded.log 2>&1; echo "padded rc $?" >> $OUT/times.txt
python3 -c "
import json
for b in json.load(open('$OUT/padded.json'))['benchmarks']:
    i = b['extra_info']; print(b['name'], round(b['stats']['median'] / i['calls_per_round'] * 1e6, 1), 'us a step,', round(i['ratio_mx.fast.sdpa'], 2), 'x MLX')
"
date -u >> $OUT/times.txt; tail -15 $OUT/sanitize.log; cat $OUT/times.txt
