#!/usr/bin/env bash
# Call 188, right after 187: does a sample's graph building slow down after a long evaluation
# (ci/gpu/build_warmth.py), then issue 5's cold table on this package.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MLX_PTX_CACHE_DIR=/tmp/fusedattend-ptx-$(cat metal/* | md5sum | cut -c1-12)
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 150 python3 ci/gpu/build_warmth.py 1 2048 32 2048 1 32768 32 32768 > $OUT/build_warmth.jsonl 2> $OUT/build_warmth.err
tail -3 $OUT/build_warmth.err; cat $OUT/build_warmth.jsonl
OUT=$OUT/table BENCH_S=150 ci/gpu/h200-session.sh cold-bench > $OUT/cold-bench.out 2>&1; tail -12 $OUT/cold-bench.out
tar -C $OUT -czf $OUT/table.tar.gz table && rm -rf $OUT/table
date -u >> $OUT/times.txt; cat $OUT/times.txt
