#!/usr/bin/env bash
# Call 218 (2026-12-06), after staging MLX: why the short 4-bit decode loops read one of two levels
# (docs/h100/retime-s64/). ci/gpu/loop_levels.py in five processes, three as the perf suite runs
# and two with MLX_USE_CUDA_GRAPHS=0, plus one over bf16 K/V, beside a log of the GPU's clocks;
# then the perf rows themselves once. One tarball (levels.tgz) and the log come back.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
R=$OUT/levels; mkdir -p $R; md5sum metal/* fusedattend/*.py ci/gpu/loop_levels.py | sort -k2 > $R/md5.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw,utilization.gpu,temperature.gpu \
  --format=csv -lms 100 > $R/clocks.csv 2>&1 & smi=$!
for run in "default_1" "nographs_1" "default_2" "nographs_2" "default_3"; do
  env_set=(); [[ $run == nographs_* ]] && env_set=(MLX_USE_CUDA_GRAPHS=0)
  echo "$run start $(date -u +%H:%M:%S.%N)" | tee -a $R/starts.txt
  env "${env_set[@]}" OUT=$R timeout 120 python3 ci/gpu/loop_levels.py --samples 40 --label $run 2>&1 | tee -a $R/levels.log | cut -c1-150
done
echo "bf16_1 start $(date -u +%H:%M:%S.%N)" | tee -a $R/starts.txt
OUT=$R timeout 120 python3 ci/gpu/loop_levels.py --samples 40 --fmt bfloat16 --label bf16_1 2>&1 | tee -a $R/levels.log | cut -c1-150
echo "perf start $(date -u +%H:%M:%S.%N)" | tee -a $R/starts.txt
timeout 150 python3 -m pytest tests/perf -m perf -p no:xdist -q --backend cuda -k "S64 and q4 and loop and not each_step" \
  --benchmark-columns=median,iqr,rounds --benchmark-json=$R/perf.json > $R/perf.log 2>&1; echo "perf rc=$?"
grep -E "test_decode_loop" $R/perf.log | cut -c1-120
kill $smi; tar -C $OUT -czf $OUT/levels.tgz levels && cp $R/levels.log $OUT/ && rm -rf $R
