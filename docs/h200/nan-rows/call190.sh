#!/usr/bin/env bash
# Call 190, right after 189: the one row past its limit in 0039 against 0038
# (test_mlx_lm_step[cuda-BatchKVCache-B32-S2048], 1.26x, limit 1.25x) timed twice more alone,
# as call 177 did for 0038's.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT; date -u > $R/times.txt
for i in 1 2; do
  timeout 80 python3 -m pytest tests/perf/test_mlx_lm_perf.py -m perf -p no:xdist -q --backend cuda \
    --benchmark-columns=median,iqr,rounds --benchmark-json=$R/mlx_lm_step_$i.json \
    > $R/mlx_lm_step_$i.log 2>&1; echo "mlx_lm_step $i rc=$?" >> $R/times.txt
  grep -E "BatchKVCache|passed|failed" $R/mlx_lm_step_$i.log | tail -12
done
date -u >> $R/times.txt; cat $R/times.txt
