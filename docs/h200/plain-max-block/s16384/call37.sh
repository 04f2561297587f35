#!/usr/bin/env bash
# bf16 at S = 16384-65536: plain K/V's split blocks of 2048 keys (MAX_BLOCK) against 1024, A/B/A'
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; grep -n "^PLAIN_LONG_BLOCKS_FROM_S\|^MIN_BLOCK" fusedattend/gpu.py | tee $R/policy.txt; date -u > $R/times.txt
V=('{}' '{"MAX_BLOCK": 2048}' '{"SIMDGROUPS": 4}')
SH=1x16384,8x16384,32x16384,1x32768,1x65536,8x65536
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_ROUNDS=6 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 200 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-queued.log 2>&1; date -u >> $R/times.txt
OUT=$R SWEEP_PLAIN_ONLY=1 SWEEP_CHAIN=1 SWEEP_ROUNDS=6 SWEEP_COLD_MB=200 SWEEP_SHAPES=$SH timeout 200 python3 ci/gpu/schedule_sweep.py "${V[@]}" > $R/sweep-chained.log 2>&1; date -u >> $R/times.txt
rm -f $R/schedule_sweep.json
cat $R/times.txt
for f in queued chained; do echo "== $f"; python3 - $R/sweep-$f.log <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for B, S in dict.fromkeys((r["B"], r["S"]) for r in rows):
    rs = [r for r in rows if (r["B"], r["S"]) == (B, S)]
    print(f"{B:>3} {S:>6} mlx {rs[0]['mlx_us']:>7}  " + "  ".join(f"{r['us']:>7}" for r in rs))
PY
done
tar -czf $OUT/call37.tgz -C $OUT r && rm -rf $R
