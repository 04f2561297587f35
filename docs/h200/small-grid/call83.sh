#!/usr/bin/env bash
# The small-grid probe again: loads cached in L2 only (__ldcg) beside plain loads and cp.async, and lone
# warps (1 a threadgroup, as the spread experiment of 18:33 ran B = 1's simdgroups).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
git rev-parse HEAD > $R/commit.txt 2>/dev/null; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
OUT=$R timeout 200 python3 ci/gpu/small_grid_bandwidth.py --grids 16,64,128 --forms loads:1,loads:2,ldcg:1,ldcg:2,ldcg:3,cp.async:4 > $R/small_grid_4w.log 2>&1; echo "rc=$?" >> $R/times.txt
SMALL_GRID_WARPS=1 OUT=$R timeout 200 python3 ci/gpu/small_grid_bandwidth.py --grids 64,128,256,512 --forms loads:1,ldcg:1,ldcg:2,cp.async:4 > $R/small_grid_1w.log 2>&1; echo "rc=$?" >> $R/times.txt
date -u >> $R/times.txt; cat $R/times.txt
for w in 4w 1w; do echo "== $w"; grep -v '^\[W' $R/small_grid_$w.log | python3 -c '
import sys, json
from collections import defaultdict
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
t = defaultdict(dict)
for r in rows: t[(r["mb"], r["form"] + ":" + str(r["depth"]))][r["grid"]] = r.get("us", "err")
grids = sorted({r["grid"] for r in rows})
print("MB form", grids)
for k, v in t.items(): print(k, [v.get(g) for g in grids])'; done
tar -czf $OUT/call83.tgz -C $OUT r && rm -rf $R
