#!/usr/bin/env bash
# the sanitizers over plain K/V in pieces (fa_run_dim): memcheck and racecheck over grids A+Q, B and split_mma, six side by side
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/san
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R/san SANITIZER_PARALLEL=1 SANITIZER_SETS="grid grid_b split_mma" SANITIZER_S=270 SANITIZER_B_S=270 SANITIZER_MMA_S=270 ci/gpu/h200-session.sh sanitize > $R/san/sanitize.out 2>&1
date -u >> $R/times.txt; cat $R/times.txt $R/san/sanitize.out
tar -czf $OUT/call69.tgz -C $OUT r && rm -rf $R
