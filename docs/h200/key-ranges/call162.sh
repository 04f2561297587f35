#!/usr/bin/env bash
# Call 162, right after 161 on the same lease: call161.sh again (its $OUT call162), tests/perf/test_mlx_lm_perf.py's model fixture now clearing MLX's and torch's caches first: in 161 four mlx_lm rows failed allocating after the rest of the suite. Baseline 0035 is this run's.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py tests/perf/*.py > $OUT/md5.txt
timeout 400 ci/perf.sh record --backend cuda > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
tail -3 $OUT/perf_record.log
new=$(ls -t tests/perf/baselines/nvidia-h200/*/*.json | head -1); cp "$new" $OUT/
python3 ci/baseline_table.py "$new" | tee $OUT/baseline_table.md
date -u >> $OUT/times.txt; cat $OUT/times.txt
