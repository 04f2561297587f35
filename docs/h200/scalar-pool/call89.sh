#!/usr/bin/env bash
# The 8-byte `scalars` input in MLX's small read-mostly pool: the decode kernel's time with it as shipped and
# padded to 16 bytes, with and without a small host-made array each step (ci/gpu/scalar_pool.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
for bs in "1 2048" "1 32768" "8 2048"; do OUT=$R timeout 100 python3 ci/gpu/scalar_pool.py $bs 2>&1 | grep -v '^\[W\|warn' | tee -a $R/scalar_pool.log; done
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call89.tgz -C $OUT r && rm -rf $R
