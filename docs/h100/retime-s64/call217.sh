#!/usr/bin/env bash
# Call 217 (written for an H200; run 2026-12-06 05:44 UTC on an H100, the fifth that came that
# morning, no H200 among them), after staging MLX: the S = 64 4-bit decode-loop rows that H200
# baseline 0040 read 1.33-1.63x slower than 0039 (docs/perf.md), by call215.sh as it is; then
# issue 5's cold table and the layer axis on the tip. The card is in device_info.txt. At most 8 files come back: s64.tgz holds
# call215.sh's outputs (calls.tgz, md5.txt, times.txt), table.tar.gz the table's.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
mkdir -p $OUT/s64 && OUT=$OUT/s64 bash docs/h100/retime-s64/call215.sh > $OUT/call215.out 2>&1
tail -40 $OUT/call215.out; tar -C $OUT -czf $OUT/s64.tgz s64 && rm -rf $OUT/s64
date -u >> $OUT/times.txt
OUT=$OUT/table BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $OUT/cold-bench.out 2>&1; tail -12 $OUT/cold-bench.out
timeout 120 python3 ci/gpu/layer_axis.py > $OUT/layers.log 2>&1; tail -4 $OUT/layers.log
tar -C $OUT -czf $OUT/table.tar.gz table && rm -rf $OUT/table
date -u >> $OUT/times.txt; cat $OUT/times.txt
