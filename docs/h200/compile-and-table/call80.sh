#!/usr/bin/env bash
# tests/test_compile.py on the H200 (--backend cuda and reference)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
timeout 240 python3 -m pytest tests/test_compile.py --backend cuda --backend reference -v -p no:cacheprovider > $R/test_compile.log 2>&1
echo "rc=$?" >> $R/times.txt; date -u >> $R/times.txt; cat $R/times.txt; tail -4 $R/test_compile.log
tar -czf $OUT/call80.tgz -C $OUT r && rm -rf $R
