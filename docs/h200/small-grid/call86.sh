#!/usr/bin/env bash
# The small-grid probe with 8 and 2 warps a threadgroup: does a grid of 16 threadgroups read faster
# with 8 warps each than with 4 (the 8-simdgroup plain block of 14:42 was no faster)?
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
SMALL_GRID_WARPS=8 OUT=$R timeout 150 python3 ci/gpu/small_grid_bandwidth.py --grids 16,32,64 --forms loads:1,loads:2,cp.async:2 > $R/small_grid_8w.log 2>&1; echo "rc=$?" >> $R/times.txt
SMALL_GRID_WARPS=2 OUT=$R timeout 150 python3 ci/gpu/small_grid_bandwidth.py --grids 16,32,64,128 --forms loads:1,cp.async:4 > $R/small_grid_2w.log 2>&1; echo "rc=$?" >> $R/times.txt
date -u >> $R/times.txt; cat $R/times.txt
for w in 8w 2w; do echo "== $w"; grep -v '^\[W' $R/small_grid_$w.log | python3 -c '
import sys, json
from collections import defaultdict
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
t = defaultdict(dict)
for r in rows: t[(r["mb"], r["form"] + ":" + str(r["depth"]))][r["grid"]] = r.get("us", "err")
grids = sorted({r["grid"] for r in rows})
print("MB form", grids)
for k, v in t.items(): print(k, [v.get(g) for g in grids])'; done
tar -czf $OUT/call86.tgz -C $OUT r && rm -rf $R
