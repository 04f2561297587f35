#!/usr/bin/env bash
# Call 223 (written 2026-12-06), after staging MLX: ci/perf_compare.py's peer gauge on real runs.
# Whatever card comes (device_info.txt): the whole perf suite compared twice with the chip's
# newest baseline (ci/perf.sh compare: rows slow once are timed again); on an H200 first the
# S = 64 loop rows three times against 0039 and 0040 (docs/h100/retime-s64/call215.sh as it is).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py ci/*.py ci/*.sh tests/perf/*.py | sort -k2 > $OUT/md5.txt
if grep -q '^nvidia-h200' $OUT/device_info.txt; then
  mkdir -p $OUT/s64 && OUT=$OUT/s64 timeout 190 bash docs/h100/retime-s64/call215.sh > $OUT/call215.out 2>&1
  tail -30 $OUT/call215.out
fi
mkdir -p $OUT/runs
for i in 1 2; do
  PERF_JSON=$OUT/runs/compare_$i.json timeout 190 ci/perf.sh compare --backend cuda > $OUT/runs/compare_$i.log 2>&1
  echo "compare $i rc=$? $(date -u +%T)" | tee -a $OUT/times.txt
  grep -E "FAIL|against m|rows" $OUT/runs/compare_$i.log | cut -c1-200
done
cd $OUT && tar czf runs.tgz runs && rm -rf runs
[ -d s64 ] && tar czf s64.tgz s64 && rm -rf s64
date -u >> times.txt; cat times.txt
