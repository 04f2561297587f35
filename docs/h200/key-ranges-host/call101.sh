# Call 101: key_ranges calls replayed (their values checked each call) and read contiguous:
# the property suite and the API, replay and compile tests with --backend cuda; the new view
# test on a copy without the contiguous copy; then ci/gpu/key_ranges_cost.py at S = 2048.
# Logs go straight to $OUT (a run cut by the device budget still returns them).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=dev
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py > $OUT/md5.txt
extra=(); python3 -m pytest --help | grep -q worksteal && extra+=(--dist worksteal)
timeout 285 python3 -m pytest tests/property tests/test_api.py tests/test_replay.py tests/test_compile.py --backend cuda -n 15 "${extra[@]}" \
  -v -p no:cacheprovider -rf --tb=short > $OUT/suite.log 2>&1; echo "suite rc=$?" >> $OUT/suite.log
grep -oE "(PASSED|FAILED|ERROR) tests/[a-z_]+" $OUT/suite.log | sort | uniq -c; tail -3 $OUT/suite.log; date -u >> $OUT/times.txt
rm -rf /tmp/nofix && mkdir /tmp/nofix && cp -r conftest.py pyproject.toml fusedattend metal tests /tmp/nofix/ && \
  sed -i 's/    return mx.contiguous(key_ranges.astype(mx.int32))/    return key_ranges.astype(mx.int32)/' /tmp/nofix/fusedattend/_problem.py && \
  (cd /tmp/nofix && grep -c 'mx.contiguous' fusedattend/_problem.py; PYTHONPATH=/tmp/nofix timeout 25 python3 -m pytest tests/test_api.py -k views_read --backend cuda -q -p no:cacheprovider --tb=line 2>&1 | tail -8) > $OUT/nofix.log 2>&1
cat $OUT/nofix.log; date -u >> $OUT/times.txt
OUT=$OUT timeout 70 python3 ci/gpu/key_ranges_cost.py 2048 > $OUT/cost_2048.log 2>&1; echo "cost rc=$?" >> $OUT/cost_2048.log
grep -h '^{' $OUT/cost_2048.log | python3 -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r["B"],r["layers"],r.get("key_ranges","")[:6],r.get("check","")[:22],r.get("all_kernels_us_a_step",""),r.get("decode_us_median",""),r.get("step_wall_us",""),r.get("outputs_bit_identical",""))'
tail -1 $OUT/cost_2048.log; date -u >> $OUT/times.txt; cat $OUT/times.txt; gzip -f $OUT/suite.log
