#!/usr/bin/env bash
# Call 106: the decode-loop benchmarks with every implementation on the same S sequence
# (bench.growing_loop, 5f6bb88): ci/gpu/decode_loop.py over the grid; the old script (one counter
# through all implementations, carried as ab_loop/decode_loop_old.py) at B = 32 beside it;
# ci/gpu/padded_loop_cost.py at B = 8 and 32; then the perf baselines (tests/perf) with the new loops.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT/r; mkdir -p $R/loops $R/old $R/padded $R/perf
date -u > $R/times.txt; md5sum metal/* fusedattend/*.py > $R/md5.txt
for B in 1 8 32; do for S in 512 2048 8192 32768; do
  echo "== $B $S"; OUT=$R/loops timeout 60 python3 ci/gpu/decode_loop.py $B $S
done; done > $R/loops/decode_loop.log 2>&1
python3 ci/gpu/decode_loop.py --table $R/loops/*.json | tee $R/loops/table.md
date -u >> $R/times.txt
for S in 2048 32768; do echo "== old 32 $S"; OUT=$R/old timeout 60 python3 ab_loop/decode_loop_old.py 32 $S; done > $R/old/decode_loop_old.log 2>&1
python3 ci/gpu/decode_loop.py --table $R/old/*.json | tee $R/old/table.md
for B in 8 32; do timeout 120 python3 ci/gpu/padded_loop_cost.py $B 2048; done > $R/padded/padded_loop_cost.log 2>&1
cut -c1-170 $R/padded/padded_loop_cost.log
date -u >> $R/times.txt
timeout 240 ci/perf.sh record --backend cuda > $R/perf/perf_record.log 2>&1; echo "perf rc=$?" >> $R/perf/perf_record.log
tail -4 $R/perf/perf_record.log; tar -C tests/perf/baselines -cf $R/perf/baselines.tar .
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call106.tgz -C $OUT r && rm -rf $R
