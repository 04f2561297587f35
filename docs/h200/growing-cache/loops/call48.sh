#!/usr/bin/env bash
# decode loops over the grid (cache growing a key a step, and at one S), then the cold table at the tip
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/loops $R/table
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
for B in 1 8 32; do for S in 512 2048 8192 32768; do
  echo "== $B $S"; OUT=$R/loops timeout 60 python3 ci/gpu/decode_loop.py $B $S
done; done > $R/loops/decode_loop.log 2>&1
python3 ci/gpu/decode_loop.py --table $R/loops/*.json | tee $R/loops/table.md
date -u >> $R/times.txt
OUT=$R/table BENCH_S=200 ci/gpu/h200-session.sh cold-bench > $R/table/cold-bench.out 2>&1
python3 ci/bench_targets.py $R/table/bench-cold.json | tail -9
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call48.tgz -C $OUT r && rm -rf $R
