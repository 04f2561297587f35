#!/usr/bin/env bash
# Call 189, right after 188: perf baseline 0039 on the package with the NaN-row kernels, compared
# with 0038 (ci/perf_compare.py, the limits of the last sessions); then compute-sanitizer memcheck
# and racecheck over the remaining set, grid (the A grid's shapes), side by side.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT; date -u > $R/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py | sort -k2 > $R/md5.txt
mkdir -p $R/calls
timeout 280 ci/perf.sh record --backend cuda > $R/calls/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $R/times.txt
tail -2 $R/calls/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $R/calls/
old=$(ls tests/perf/baselines/nvidia-h200/*/0038_*.json)
python3 ci/perf_compare.py --fail 25 --host-bound-fail 60 --host-bound-us 75 "$old" "$new" > $R/calls/compare.log 2>&1
echo "compare rc=$?" >> $R/times.txt; tail -8 $R/calls/compare.log
python3 ci/baseline_table.py "$new" > $R/calls/baseline_table.md; date -u >> $R/times.txt
OUT=$R/calls/sanitize SANITIZER_SETS="grid" SANITIZER_PARALLEL=1 SANITIZER_S=280 \
  ci/gpu/h200-session.sh sanitize > $R/calls/sanitize.out 2>&1
grep -h "rc=\|SUMMARY\|passed\|failed" $R/calls/sanitize/*.log | sort | uniq -c
date -u >> $R/times.txt; cd $R && tar czf calls.tgz calls && rm -rf calls; cat times.txt
