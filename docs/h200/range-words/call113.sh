#!/usr/bin/env bash
# Call 113: compute-sanitizer memcheck and racecheck over every set, side by side (logs in one
# archive); then the H200 perf baselines and the warm table.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
mkdir -p /tmp/sanitize
OUT=/tmp/sanitize SANITIZER_PARALLEL=1 SANITIZER_MMA_S=290 ci/gpu/h200-session.sh sanitize > $OUT/sanitize.out 2>&1
cat $OUT/sanitize.out; tar czf $OUT/sanitize-logs.tgz -C /tmp sanitize; date -u >> $OUT/times.txt
OUT=$OUT/perf PERF_S=200 BENCH_S=150 ci/gpu/h200-session.sh perf > $OUT/perf.out 2>&1; tail -30 $OUT/perf.out
date -u >> $OUT/times.txt; cat $OUT/times.txt
