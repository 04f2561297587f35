#!/usr/bin/env bash
# A/B/C/A': plain K/V in 1024-key matrix blocks from S = 513 or 2048 against the tip, S = 768-2048
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
V=('{}' '{"PLAIN_LONG_BLOCKS_FROM_S": 513}' '{"PLAIN_LONG_BLOCKS_FROM_S": 2048}' '{"SIMDGROUPS": 4}')
SH=1x768,8x768,32x768,1x1024,8x1024,32x1024,1x1536,8x1536,32x1536,1x2048,8x2048,32x2048
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
tar -czf $OUT/call32.tgz -C $OUT r && rm -rf $R
