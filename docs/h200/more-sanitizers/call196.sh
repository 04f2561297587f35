#!/usr/bin/env bash
# Call 196 (2026-12-04), after staging (carry .gpu/p1..p3 with `bash ci/gpu/stage-parts.sh receive
# .gpu/pN`, then .gpu/p4 with `receive .gpu/p4 && install >/dev/null && bash
# docs/h200/more-sanitizers/call196.sh`): compute-sanitizer's two other tools, initcheck (reads of
# device memory nothing wrote) and synccheck (barriers and warp-synchronous calls where not every
# thread that must reach them does), over the five sets the memcheck and racecheck runs take
# (ci/gpu/h200-session.sh sanitize), side by side. Never run on these kernels before.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
compute-sanitizer --version | tail -1 >> $OUT/times.txt
OUT=$OUT/sanitize SANITIZER_TOOLS="initcheck synccheck" SANITIZER_PARALLEL=1 SANITIZER_S=480 SANITIZER_B_S=480 \
  SANITIZER_MMA_S=520 SANITIZER_PINNED_S=480 SANITIZER_RANGES_S=480 \
  ci/gpu/h200-session.sh sanitize > $OUT/sanitize.out 2>&1
cat $OUT/sanitize.out; grep -h "rc=\|SUMMARY\|passed\|failed" $OUT/sanitize/*.log | sort | uniq -c
# Which kernels any report names (ours are fa_*), and the first reports in full.
grep -h -A6 "^========= [A-Z]" $OUT/sanitize/*.log | grep -oE "in [A-Za-z_:0-9<>]+|fa_[A-Za-z0-9_]+" | sort | uniq -c | sort -rn | head -30
grep -h -m3 -A12 "^========= [A-Z][a-z]" $OUT/sanitize/*.log | head -80
date -u >> $OUT/times.txt; tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
