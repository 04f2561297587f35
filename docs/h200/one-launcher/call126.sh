#!/usr/bin/env bash
# Call 126: the new perf rows (short loops, loops with every step evaluated) timed twice more on
# the same machine, to see how far two runs of them read apart (not saved as baselines).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py > $OUT/md5.txt
for run in 1 2; do
  timeout 120 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda -k "each_step or (decode_loop and S64)" \
    --benchmark-json=$OUT/run$run.json > $OUT/run$run.log 2>&1; echo "run $run rc=$?"
  python3 ci/baseline_table.py $OUT/run$run.json | tee $OUT/run$run.md
done
date -u >> $OUT/times.txt; cat $OUT/times.txt
