#!/usr/bin/env bash
# Call 225 (written 2026-12-06 for an H200), after staging MLX: the S = 64 loop rows that
# baseline 0040 read 1.33-1.63x slower than 0039, three times alone (docs/h100/retime-s64/call215.sh
# as it is); one whole `ci/perf.sh compare` against 0040 with the peer gauge (rows slow once timed
# again); issue 5's cold table and the layer axis on the tip. The card is in device_info.txt.
# At most 8 files come back: s64.tgz, runs.tgz (with md5.txt) and table.tar.gz (with the layer
# axis) hold the three parts' outputs.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
mkdir -p $OUT/runs; md5sum metal/* fusedattend/*.py ci/*.py ci/*.sh tests/perf/*.py | sort -k2 > $OUT/runs/md5.txt
mkdir -p $OUT/s64 && OUT=$OUT/s64 timeout 150 bash docs/h100/retime-s64/call215.sh > $OUT/call215.out 2>&1
grep -E "rc=|FAIL|against m|rows" $OUT/call215.out | cut -c1-180; tar -C $OUT -czf $OUT/s64.tgz s64 && rm -rf $OUT/s64
date -u >> $OUT/times.txt
PERF_JSON=$OUT/runs/compare.json timeout 200 ci/perf.sh compare --backend cuda > $OUT/runs/compare.log 2>&1
echo "compare rc=$? $(date -u +%T)" | tee -a $OUT/times.txt
grep -E "FAIL|against m|rows" $OUT/runs/compare.log | cut -c1-200
tar -C $OUT -czf $OUT/runs.tgz runs && rm -rf $OUT/runs
OUT=$OUT/table BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $OUT/cold-bench.out 2>&1; tail -12 $OUT/cold-bench.out
OUT=$OUT/table timeout 120 python3 ci/gpu/layer_axis.py > $OUT/table/layers.log 2>&1; tail -4 $OUT/table/layers.log
tar -C $OUT -czf $OUT/table.tar.gz table && rm -rf $OUT/table
date -u >> $OUT/times.txt; cat $OUT/times.txt
