#!/usr/bin/env bash
# 8 simdgroups a plain split block against the shipped 4: GPU time chained, B = 1, 8, 32 x S = 2048, 8192, 32768,
# the two alternated (4, 8, 8, 4) so drift falls on both; cedf4ea's metal/ (= f77cc62's)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
python3 -c 'import mlx.core; print(mlx.core.__version__)' || exit 3
gaps() { d=$1; shift; echo "== $d $*"; OUT=$R/gaps/$d timeout 40 python3 ci/gpu/kernel_gaps.py "$@" --fmt bfloat16 --impl cuda --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
n=0; for order in "4 8" "8 4"; do n=$((n+1)); mkdir -p $R/gaps/r$n
for S in 2048 8192 32768; do for B in 1 8 32; do for g in $order; do
  (( SECONDS < 470 )) && gaps r$n $B $S --set "{\"PLAIN_MMA_SIMDGROUPS\": $g}"
done; done; done; done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt; cat $R/times.txt
python3 - $R/gaps <<'PY'
import glob, json, os, statistics, sys
rows = {}
for f in glob.glob(os.path.join(sys.argv[1], "r*", "*.json")):
    d = json.load(open(f)); a = d["args"]; g = json.loads(a["set"])["PLAIN_MMA_SIMDGROUPS"]
    busy = statistics.median(s["busy_us"] + s.get("gaps_us", 0) for s in d["samples"])
    rows.setdefault((a["B"], a["S"]), {}).setdefault(g, []).append(busy)
print("B S | busy+gaps us/call, 4 simdgroups | 8 simdgroups | 8/4")
for (B, S), v in sorted(rows.items()):
    m4, m8 = statistics.mean(v.get(4, [0])), statistics.mean(v.get(8, [0]))
    print(B, S, "|", [round(x, 1) for x in v.get(4, [])], "|", [round(x, 1) for x in v.get(8, [])], "|", round(m8 / m4, 3) if m4 else None)
PY
tar -czf $OUT/call64.tgz -C $OUT r && rm -rf $R
