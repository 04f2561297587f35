#!/usr/bin/env bash
# Call 226 (written 2026-12-06), right after call 225 on the same lease: issue 5's cold table and the
# layer axis on the tip's package (table.tar.gz; md5.txt lists the files). The card is in device_info.txt.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
mkdir -p $OUT/table; md5sum metal/* fusedattend/*.py ci/*.py ci/gpu/*.py | sort -k2 > $OUT/table/md5.txt
OUT=$OUT/table BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $OUT/cold-bench.out 2>&1; tail -12 $OUT/cold-bench.out
OUT=$OUT/table timeout 120 python3 ci/gpu/layer_axis.py > $OUT/table/layers.log 2>&1; tail -4 $OUT/table/layers.log
tar -C $OUT -czf $OUT/table.tar.gz table && rm -rf $OUT/table
date -u >> $OUT/times.txt; cat $OUT/times.txt
