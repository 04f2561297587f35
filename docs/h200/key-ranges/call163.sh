#!/usr/bin/env bash
# Call 163 (a fresh lease, after the staging calls): were 0035's slower host-bound rows the lease
# or ff6e5cd? The perf suite's B = 1 decode rows and padded loops, the package before the change
# (a9253a6's fusedattend/ and metal/, carried as ab_base/) and after (the tree), taking turns,
# two rounds each; then `python3 ci/perf_compare.py` of each round's after against its before.
export PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py ab_base/fusedattend/*.py | sort -k2 > $OUT/md5.txt
# before: a copy of the tree with ab_base's package (pytest puts the rootdir first on sys.path).
before=/tmp/before; rm -rf $before; mkdir $before; cp -r conftest.py pyproject.toml tests ci $before/ 2>/dev/null
cp -r ab_base/fusedattend ab_base/metal $before/
for round in 1 2; do
  for variant in before after; do
    dir=$PWD; [ $variant = before ] && dir=$before
    (cd $dir && PYTHONPATH=$dir timeout 120 python3 -m pytest tests/perf/test_decode_perf.py -m perf -p no:xdist -q --backend cuda \
      -k "padded or (test_decode[ and B1-)" --benchmark-json=$OUT/ab_${variant}_$round.json > $OUT/ab_${variant}_$round.log 2>&1)
    echo "$variant $round rc $?" >> $OUT/times.txt
  done
  python3 ci/perf_compare.py $OUT/ab_before_$round.json $OUT/ab_after_$round.json > $OUT/compare_$round.txt 2>&1
done
date -u >> $OUT/times.txt; cat $OUT/compare_*.txt $OUT/times.txt
