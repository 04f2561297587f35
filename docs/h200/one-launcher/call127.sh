#!/usr/bin/env bash
# Call 127: compute-sanitizer memcheck and racecheck over every set, side by side, on this tree
# (the first run since a74e2dd gave single launches a block end of max(S, 512)).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
OUT=$OUT/sanitize SANITIZER_PARALLEL=1 SANITIZER_MMA_S=290 ci/gpu/h200-session.sh sanitize > $OUT/sanitize.out 2>&1
cat $OUT/sanitize.out; date -u >> $OUT/times.txt
tar -C $OUT -czf $OUT/sanitize-logs.tar.gz sanitize && rm -rf $OUT/sanitize
cat $OUT/times.txt
