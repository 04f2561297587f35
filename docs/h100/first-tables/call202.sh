#!/usr/bin/env bash
# Call 202 (2026-12-05, 16:18–16:21 UTC, NVIDIA H100 80GB HBM3), after staging: the perf
# baselines and the two benchmark tables again, now that bench.time_call queues only the calls
# that fit in memory (call 201's perf record ran out of memory at dequant+sdpa, B = 32,
# S = 32768). The record still failed 8 tests out of memory; call203.sh is the next fix.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core as mx; print(mx.device_info())' > $OUT/device_info.txt || exit 3
python3 -m fusedattend.chip >> $OUT/device_info.txt; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
python3 -m pytest -q -p no:cacheprovider tests/test_time_call.py > $OUT/test_time_call.log 2>&1; tail -1 $OUT/test_time_call.log
PERF_S=300 BENCH_S=170 bash ci/gpu/h200-session.sh perf 2>&1 | tail -12
grep -h "passed\|failed" $OUT/perf_record.log | tail -3
OUT=$OUT/cold BENCH_S=170 bash ci/gpu/h200-session.sh cold-bench 2>&1 | tail -10
date -u >> $OUT/times.txt; cat $OUT/times.txt
# a call brings back only so many files: two
cd $OUT && tar -czf results.tar.gz --exclude=baselines.tar --exclude=results.tar.gz * && ls | grep -v "^baselines.tar$\|^results.tar.gz$" | xargs rm -rf
