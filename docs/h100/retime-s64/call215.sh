#!/usr/bin/env bash
# Call 215 (written 2026-12-05, run 2026-12-06 04:20 UTC after call 216, on an H100: no H200
# could be had), after staging MLX: the four S = 64 4-bit decode-loop rows that H200
# baseline 0040 read 1.33-1.63x slower than 0039 (docs/perf.md), timed three times alone (with their bf16 rows, as a gauge of the host) and
# compared with both. Whatever card comes: the card is in device_info.txt.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
R=$OUT/calls; mkdir -p $R; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py tests/perf/*.py | sort -k2 > $OUT/md5.txt
base=tests/perf/baselines/nvidia-h200/Linux-CPython-3.12-64bit
for i in 1 2 3; do
  timeout 150 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda -k "S64 and loop" \
    --benchmark-columns=median,iqr,rounds --benchmark-json=$R/s64_$i.json > $R/s64_$i.log 2>&1
  echo "s64 $i rc=$?" | tee -a $OUT/times.txt
  for b in 0039 0040; do
    python3 ci/perf_compare.py --fail 25 --host-bound-fail 60 --host-bound-us 75 $base/${b}_nvidia-h200.json \
      $R/s64_$i.json > $R/s64_${i}_vs_$b.log 2>&1; echo "  vs $b rc=$?"; grep -E "S64" $R/s64_${i}_vs_$b.log | cut -c1-160
  done
done
date -u >> $OUT/times.txt
cd $OUT && tar czf calls.tgz calls && rm -rf calls; cat times.txt
