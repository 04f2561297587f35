#!/usr/bin/env bash
# Call 200 (2026-12-05), after staging (README, "Developing the GPU kernels without a local GPU"):
# the property suite on drawn cases (set random) under all four sanitizers in one go, now that
# SANITIZER_PARALLEL=1 gives each property file its own process: 4 tools x 7 files side by side.
# initcheck runs apart only because its SANITIZER_OPTIONS are its own.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py conftest.py ci/gpu/h200-session.sh | sort -k2 > $OUT/md5.txt
mkdir -p $OUT/sanitize
export SANITIZER_SETS=random SANITIZER_PARALLEL=1 SANITIZER_RANDOM_S=${FILE_S:-520}
OUT=$OUT/sanitize SANITIZER_TOOLS=initcheck SANITIZER_OPTIONS="--check-api-memory-access no" \
  ci/gpu/h200-session.sh sanitize > $OUT/initcheck.out 2>&1 &
OUT=$OUT/sanitize SANITIZER_TOOLS="memcheck racecheck synccheck" ci/gpu/h200-session.sh sanitize > $OUT/others.out 2>&1 &
wait
date -u >> $OUT/times.txt
grep -h "rc=\|SUMMARY\| passed\| failed" $OUT/sanitize/*.log | sed 's/ in [0-9.]*s.*//' | sort | uniq -c
grep -h "^========= [A-Z]" $OUT/sanitize/*.log | grep -v "SUMMARY\|COMPUTE-SANITIZER" | sed 's/0x[0-9a-f]*/ADDR/g' | sort | uniq -c | sort -rn | head -20
for f in $OUT/sanitize/*-random-*.log; do echo "$(basename $f) $(grep -c ' PASSED' $f) passed $(grep -c ' FAILED' $f) failed; $(grep -ho ' in [0-9.]*s' $f | tail -1)"; done
tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
