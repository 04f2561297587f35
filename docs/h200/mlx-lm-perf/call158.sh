#!/usr/bin/env bash
# Call 158 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: tests/perf's new mlx_lm model-step rows alone (tests/perf/test_mlx_lm_perf.py), timed
# as `ci/perf.sh record` would but saved as a run, not as a baseline: too little device time was
# left for the whole perf suite (the device could not be started four times, at a cost each).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 200 python3 -m pytest tests/perf/test_mlx_lm_perf.py -m perf -p no:xdist -q --backend cuda \
  --benchmark-columns=median,iqr,rounds --benchmark-json=$OUT/mlx_lm_perf.json > $OUT/perf.log 2>&1
echo "perf rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
python3 ci/baseline_table.py $OUT/mlx_lm_perf.json > $OUT/table.md 2>&1
tail -3 $OUT/perf.log; cat $OUT/table.md $OUT/times.txt
