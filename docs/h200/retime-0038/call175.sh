#!/usr/bin/env bash
# Call 175 (2026-12-03), after staging MLX: 0037's open row (BatchKVCache, B = 32, S = 2048, read
# 1.70x 0036's) timed again: perf baseline 0038 and ci/perf_compare.py 0037 -> 0038, then the
# mlx_lm step rows twice more alone; the two test files whose read-back patch became the
# forbid_key_ranges_read fixture (7806a3a) with --backend cuda; issue 5's cold table. One archive.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT; date -u > $R/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py | sort -k2 > $R/md5.txt
mkdir -p $R/calls
timeout 60 python3 -m pytest -q -p no:cacheprovider --backend cuda tests/test_key_ranges_check.py \
  tests/parity/test_mlx_lm_batched.py > $R/calls/fixture_tests.log 2>&1; echo "fixture tests rc=$?" | tee -a $R/times.txt
tail -2 $R/calls/fixture_tests.log
timeout 280 ci/perf.sh record --backend cuda > $R/calls/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $R/times.txt
tail -2 $R/calls/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $R/calls/
old=$(ls tests/perf/baselines/nvidia-h200/*/0037_*.json)
python3 ci/perf_compare.py --fail 25 --host-bound-fail 60 --host-bound-us 75 "$old" "$new" > $R/calls/compare.log 2>&1
echo "compare rc=$?" >> $R/times.txt; tail -5 $R/calls/compare.log
python3 ci/baseline_table.py "$new" > $R/calls/baseline_table.md; date -u >> $R/times.txt
for i in 1 2; do
  timeout 80 python3 -m pytest tests/perf/test_mlx_lm_perf.py -m perf -p no:xdist -q --backend cuda \
    --benchmark-columns=median,iqr,rounds --benchmark-json=$R/calls/mlx_lm_step_$i.json \
    > $R/calls/mlx_lm_step_$i.log 2>&1; echo "mlx_lm_step $i rc=$?" >> $R/times.txt
  grep -E "BatchKVCache|passed|failed" $R/calls/mlx_lm_step_$i.log | tail -12
done
date -u >> $R/times.txt
OUT=$R/calls/cold BENCH_S=140 ci/gpu/h200-session.sh cold-bench | tail -8
date -u >> $R/times.txt
cd $R && tar czf calls.tgz calls && rm -rf calls; cat times.txt
