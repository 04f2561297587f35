#!/usr/bin/env bash
# Call 197 (2026-12-04), after staging as for call 196: initcheck again over the five fixed sets,
# now with --check-api-memory-access no (call 196's reports were all MLX's allocator copying
# whole buffers, cudaMemcpy of bytes no kernel wrote), and the new "random" set (the property
# suite under HYPOTHESIS_PROFILE=sanitize: its pinned cases and cases drawn afresh) under
# initcheck, memcheck and racecheck; side by side.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py conftest.py | sort -k2 > $OUT/md5.txt
mkdir -p $OUT/sanitize
OUT=$OUT/sanitize SANITIZER_TOOLS=initcheck SANITIZER_OPTIONS="--check-api-memory-access no" SANITIZER_PARALLEL=1 \
  SANITIZER_SETS="grid grid_b layouts split_mma key_ranges random" SANITIZER_S=500 SANITIZER_B_S=500 \
  SANITIZER_MMA_S=540 SANITIZER_PINNED_S=500 SANITIZER_RANGES_S=500 SANITIZER_RANDOM_S=540 \
  ci/gpu/h200-session.sh sanitize > $OUT/sanitize-initcheck.out 2>&1 &
OUT=$OUT/sanitize SANITIZER_TOOLS="memcheck racecheck" SANITIZER_PARALLEL=1 SANITIZER_SETS=random SANITIZER_RANDOM_S=540 \
  ci/gpu/h200-session.sh sanitize > $OUT/sanitize-random.out 2>&1 &
wait
cat $OUT/sanitize-*.out; grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/sanitize/*.log | sort | uniq -c
# Any report's kind and the kernel it names (ours are fa_*), then the first reports in full.
grep -h "^========= [A-Z]" $OUT/sanitize/*.log | grep -v SUMMARY | sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | sort -rn | head -20
grep -h -A3 "^========= [A-Z][a-z]" $OUT/sanitize/*.log | grep -oE "fa_[A-Za-z0-9_]+" | sort | uniq -c | head
grep -h -m2 -A14 "^========= [A-Z][a-z]" $OUT/sanitize/*.log | head -60
grep -c "PASSED\|FAILED" $OUT/sanitize/*-random.log
date -u >> $OUT/times.txt; tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
