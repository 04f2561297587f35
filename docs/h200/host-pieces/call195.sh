#!/usr/bin/env bash
# Call 195 (2026-12-04), right after call 194 on the same machine: issue 5's cold table and the
# layer axis on the tip's package (metal/ as in 646f822).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
OUT=$OUT/table BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $OUT/cold-bench.out 2>&1; tail -12 $OUT/cold-bench.out
timeout 120 python3 ci/gpu/layer_axis.py > $OUT/layers.log 2>&1; tail -4 $OUT/layers.log
tar -C $OUT -czf $OUT/table.tar.gz table && rm -rf $OUT/table
date -u >> $OUT/times.txt; cat $OUT/times.txt
