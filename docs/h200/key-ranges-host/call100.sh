# Call 100: ci/gpu/key_ranges_cost.py (rounds in turn, 1 and 8 layers a step) at S = 2048, then the
# candidate check (compiled-check.diff: MLX ops fused by mx.compile) on a patched copy of the
# tree: the property suite and the API, compile and replay tests with --backend cuda
export PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT/r; mkdir -p $R/cost $R/candidate; date -u > $R/times.txt; md5sum metal/* > $R/metal.md5
PYTHONPATH=$PWD OUT=$R/cost timeout 230 python3 ci/gpu/key_ranges_cost.py 2048 > $R/cost/cost_2048.log 2>&1; echo "cost rc=$?" >> $R/cost/cost_2048.log
grep -h '^{' $R/cost/cost_2048.log | python3 -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r["B"],r["layers"],r.get("key_ranges","")[:6],r.get("check","")[:14],r.get("all_kernels_us_a_step",""),r.get("decode_us_median",""),r.get("step_wall_us",""),r.get("outputs_bit_identical",""))'
tail -1 $R/cost/cost_2048.log; date -u >> $R/times.txt
rm -rf /tmp/alt && mkdir /tmp/alt && cp -r conftest.py pyproject.toml fusedattend metal tests ci /tmp/alt/ && cd /tmp/alt && patch -p1 < $OLDPWD/docs/h200/key-ranges-host/compiled-check.diff > $R/candidate/patch.log && md5sum fusedattend/_problem.py >> $R/candidate/patch.log && PYTHONPATH=/tmp/alt python3 -c "import fusedattend._problem as p; print(\"patched\", hasattr(p, \"_ranges_outside\"), p.__file__)" | tee -a $R/candidate/patch.log
extra=(); python3 -m pytest --help | grep -q worksteal && extra+=(--dist worksteal)
PYTHONPATH=/tmp/alt HYPOTHESIS_PROFILE=dev timeout 320 python3 -m pytest tests/property tests/test_api.py tests/test_compile.py tests/test_replay.py --backend cuda -n 15 "${extra[@]}" -p no:cacheprovider -q -rf --tb=short > $R/candidate/suite.log 2>&1; echo "suite rc=$?" >> $R/candidate/suite.log
tail -4 $R/candidate/suite.log; gzip -f $R/candidate/suite.log
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call100.tgz -C $OUT r && rm -rf $R
