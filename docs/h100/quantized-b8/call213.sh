#!/usr/bin/env bash
# Call 213 (2026-12-05), after staging, on the H200: the 32-layer model generating at B = 1 and 8
# (ci/gpu/mlx_lm_decode.py, 5 rounds) in a fresh machine's first process, then the perf suite's
# 4-bit loop rows at S = 64 twice (H200 baseline 0040 read four of them 1.33-1.63x slower than
# 0039), then the model again. Call 208 (after a perf record) read 19.15 ms a token at B = 8 over
# a 4-bit cache; on an H100, call 210 (after the S = 64 rows) read 18.33, call 212 (fresh) 7.97-8.13.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
python3 -m fusedattend.chip > $OUT/r/device_info.txt || exit 3; date -u > $OUT/r/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/r/md5.txt
decode() {
  echo "# decode $1"
  timeout 150 python3 ci/gpu/mlx_lm_decode.py --batch 1 8 --context 8192 --rounds 5 --json $OUT/r/decode-$1.json 2>&1 \
    | tee $OUT/r/decode-$1.log | grep "^| [18] " | cut -c1-60,170-
  date -u >> $OUT/r/times.txt
}
decode first
for n in 1 2; do
  timeout 120 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda -k "S64 and q4 and loop" \
    --benchmark-columns=median,iqr,rounds --benchmark-json=$OUT/r/s64-$n.json > $OUT/r/s64-$n.log 2>&1
  echo "s64 run $n rc=$?"; tail -1 $OUT/r/s64-$n.log
done
date -u >> $OUT/r/times.txt
decode after-perf
cd $OUT && tar -czf call213.tar.gz r && rm -rf r
