#!/usr/bin/env bash
# Call 214 (2026-12-05), after staging: every step of the 32-layer model's patched decode timed
# (steps_spread.py), B = 8 in two processes of 12 rounds, then B = 1 in one of 8.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
python3 -m fusedattend.chip > $OUT/r/device_info.txt || exit 3; date -u > $OUT/r/times.txt
for run in B8-1 B8-2 B1; do
  b=${run%%-*}; b=${b#B}
  echo "# $run"
  B=$b ROUNDS=$([ $b = 8 ] && echo 12 || echo 8) timeout 150 python3 docs/h100/quantized-b8/steps_spread.py \
    $OUT/r/spread-$run.json 2>&1 | tee $OUT/r/spread-$run.log | grep -v Warning
  date -u >> $OUT/r/times.txt
done
cd $OUT && tar -czf call214.tar.gz r && rm -rf r
