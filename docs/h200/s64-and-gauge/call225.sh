#!/usr/bin/env bash
# Call 225 (written 2026-12-06 for an H200), after staging MLX: the S = 64 loop rows that
# baseline 0040 read 1.33-1.63x slower than 0039, three times alone (docs/h100/retime-s64/call215.sh
# as it is); one whole `ci/perf.sh compare` against the chip's newest baseline (0040 on an H200) with
# the peer gauge (rows slow once timed again). The card is in device_info.txt. At most 8 files
# come back: s64.tgz and runs.tgz (with md5.txt) hold the two parts' outputs. On another card the
# S = 64 part is skipped. Split on 2026-12-06 21:20 before it ran: its third part (the cold table,
# the layer axis) is call226.sh, since the three parts' time limits (150 + 200 + 320 s) passed a
# call's 600.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
mkdir -p $OUT/runs; md5sum metal/* fusedattend/*.py ci/*.py ci/*.sh tests/perf/*.py | sort -k2 > $OUT/runs/md5.txt
if grep -q '^nvidia-h200' $OUT/device_info.txt; then  # (the S = 64 rows are compared with H200 baselines)
  mkdir -p $OUT/s64 && OUT=$OUT/s64 timeout 150 bash docs/h100/retime-s64/call215.sh > $OUT/call215.out 2>&1
  grep -E "rc=|FAIL|against m|rows" $OUT/call215.out | cut -c1-180; tar -C $OUT -czf $OUT/s64.tgz s64 && rm -rf $OUT/s64
fi
date -u >> $OUT/times.txt
PERF_JSON=$OUT/runs/compare.json timeout 200 ci/perf.sh compare --backend cuda > $OUT/runs/compare.log 2>&1
echo "compare rc=$? $(date -u +%T)" | tee -a $OUT/times.txt
grep -E "FAIL|against m|rows" $OUT/runs/compare.log | cut -c1-200
tar -C $OUT -czf $OUT/runs.tgz runs && rm -rf $OUT/runs
date -u >> $OUT/times.txt; cat $OUT/times.txt
