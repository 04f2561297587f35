#!/usr/bin/env bash
# Call 187, right after 186: compute-sanitizer memcheck and racecheck over grid B (split blocks
# and merge, S up to 2000), decode_mma.metal's split schedule (split_mma), the pinned K/V layouts
# and the key_ranges tests, side by side.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/sanitize SANITIZER_SETS="grid_b split_mma layouts key_ranges" SANITIZER_PARALLEL=1 SANITIZER_B_S=400 SANITIZER_MMA_S=540 \
  SANITIZER_PINNED_S=400 SANITIZER_RANGES_S=400 \
  ci/gpu/h200-session.sh sanitize > $OUT/sanitize.out 2>&1
cat $OUT/sanitize.out; grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/sanitize/*.log | sort | uniq -c
date -u >> $OUT/times.txt; tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
