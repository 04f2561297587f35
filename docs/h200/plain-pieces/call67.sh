#!/usr/bin/env bash
# plain K/V runs in pieces (fa_run_dim: one vector load of a key's lanes reads one stretch of its row) against
# cedf4ea's metal/ (ab_base/): GPU time chained, one lease, alternated
R=$OUT/r; mkdir -p $R/gaps
md5sum metal/* > $R/metal.md5; md5sum ab_base/metal/* > $R/metal-base.md5; date -u > $R/times.txt
python3 -c 'import mlx.core' || exit 3
gaps() { tree=$1; d=$2; shift 2; echo "== $tree $d $*"; mkdir -p $R/gaps/$tree-$d
  PYTHONPATH=$PWD/$tree OUT=$R/gaps/$tree-$d timeout 40 python3 $tree/ci/gpu/kernel_gaps.py "$@" --fmt bfloat16 --impl cuda --chain 2>&1 | grep -v "^\[W" | tail -7; }
{
n=0; for order in "ab_base ." ". ab_base"; do n=$((n+1))
for bs in "1 2048" "8 2048" "32 2048" "1 32768" "8 32768" "32 32768"; do for tree in $order; do
  (( SECONDS < 150 )) && gaps $tree r$n $bs
done; done; done
} > $R/gaps.log 2>&1
date -u >> $R/times.txt
python3 - $R/gaps <<'PY'
import glob, json, os, statistics, sys
rows = {}
for f in glob.glob(os.path.join(sys.argv[1], "*", "*.json")):
    tree = "base" if "ab_base-" in f else "pieces"
    d = json.load(open(f)); a = d["args"]
    busy = statistics.median(s["busy_us"] + s.get("gaps_us", 0) for s in d["samples"])
    rows.setdefault((a["B"], a["S"]), {}).setdefault(tree, []).append(busy)
print("B S | busy+gaps us/call (median of 5 samples of 20 chained calls), cedf4ea | pieces | pieces/cedf4ea")
for (B, S), v in sorted(rows.items()):
    b, p = statistics.mean(v.get("base", [0])), statistics.mean(v.get("pieces", [0]))
    print(B, S, "|", [round(x, 1) for x in v.get("base", [])], "|", [round(x, 1) for x in v.get("pieces", [])], "|", round(p / b, 3) if b else None)
PY
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call67.tgz -C $OUT r && rm -rf $R
