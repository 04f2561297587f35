#!/usr/bin/env bash
# Call 203 (2026-12-05, NVIDIA H100 80GB HBM3), after staging: the perf record again, now that
# bench.release_memory empties MLX's and torch's caches between shapes (call 202's record ran
# out of memory in 8 tests). memlog.py logs who holds GPU memory after each test.
export PYTHONPATH=$PWD:$PWD/docs/h100/first-tables PYTHONUNBUFFERED=1 MEMLOG=$OUT/memlog.txt
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
python3 -m pytest -q -p no:cacheprovider tests/test_time_call.py 2>&1 | tail -1
# is mx.device_info()'s free_memory read when asked, or once? (it raised: 10**10 is over int32)
python3 -c 'import mlx.core as mx; f=lambda: mx.device_info()["free_memory"]/1e9; a=f(); x=mx.zeros((10**10,),mx.uint8); mx.eval(x); print(f"free_memory {a:.1f} GB, then {f():.1f} GB with 10 GB allocated")' | tee -a $OUT/device_info.txt
timeout 330 ci/perf.sh record --backend cuda -p memlog > $OUT/perf_record.log 2>&1; echo "perf rc=$?" | tee -a $OUT/perf_record.log
grep -h "passed\|failed" $OUT/perf_record.log | tail -2
tar -C tests/perf/baselines -cf $OUT/baselines.tar nvidia-h100-80gb-hbm3
date -u >> $OUT/times.txt; cat $OUT/times.txt
