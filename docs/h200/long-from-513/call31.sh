#!/usr/bin/env bash
# A/B/C/A': plain K/V in the matrix kernel's 1024-key blocks from S = 2048 (4 or 8 simdgroups) against the tip
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
V=('{}' '{"PLAIN_LONG_BLOCKS_FROM_S": 2048}' '{"PLAIN_LONG_BLOCKS_FROM_S": 2048, "PLAIN_MMA_SIMDGROUPS": 8}' '{"SIMDGROUPS": 4}')
SH=1x2048,8x2048,32x2048,1x3072,8x3072,32x3072,1x8192,32x8192
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_ROUNDS=6 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 240 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-queued.log 2>&1; date -u >> $R/times.txt
mv $R/schedule_sweep.json $R/sweep-queued.json
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_CHAIN=1 SWEEP_ROUNDS=6 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 240 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-chained.log 2>&1; date -u >> $R/times.txt
mv $R/schedule_sweep.json $R/sweep-chained.json
cat $R/times.txt
for f in queued chained; do echo "== $f"; python3 - $R/sweep-$f.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for B, S in dict.fromkeys((r["B"], r["S"]) for r in rows):
    rs = [r for r in rows if (r["B"], r["S"]) == (B, S)]
    print(f"{B:>3} {S:>6} mlx {rs[0]['mlx_us']:>7}  " + "  ".join(f"{r['us']:>7}" for r in rs))
PY
done
tar -czf $OUT/call31.tgz -C $OUT r && rm -rf $R
