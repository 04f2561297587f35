#!/usr/bin/env bash
# Call 155 (after three calls carried .gpu/p1-p3; this one carries p4 and installs), on a fresh
# machine: where a B = 1 step's graph building goes in the Llama-3-8B-shaped model, the time inside
# the attention function (mlx_lm's against patched) and a profile of a patched step's build.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
for args in "2048" "32768" "2048 --quantized"; do
  timeout 150 python3 docs/h200/mlx-lm-batch/attention_build_cost.py $args > "$OUT/build_${args// /_}.log" 2>&1
  echo "$args rc $?" >> $OUT/times.txt; date -u >> $OUT/times.txt
done
head -4 $OUT/build_*.log; cat $OUT/times.txt
