#!/usr/bin/env bash
# decode loops over the grid with cabda0b's package (before the growing-cache replay); then the perf suite against baseline 0028
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/old $R/perf
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
for B in 1 8 32; do for S in 512 2048 8192 32768; do
  echo "== $B $S"; OUT=$R/old PYTHONPATH=$PWD/ab_oldpkg timeout 40 python3 ci/gpu/decode_loop.py $B $S
done; done > $R/old/decode_loop.log 2>&1
python3 ci/gpu/decode_loop.py --table $R/old/*.json | tee $R/old/table.md
date -u >> $R/times.txt
timeout 270 ci/perf.sh compare --backend cuda > $R/perf/compare.log 2>&1; echo "compare rc=$?" >> $R/perf/compare.log
tail -40 $R/perf/compare.log
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call49.tgz -C $OUT r && rm -rf $R
