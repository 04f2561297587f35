# Call 97: the key_ranges check on the host (8ad17c7) timed on the H200, the refactored probes run
# once (8c2e5b5), then the property and parity suites with --backend cuda on the tip
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT/r; mkdir -p $R/verify $R/pool; date -u > $R/times.txt; md5sum metal/* > $R/metal.md5; git log -1 --format=%H > $R/commit.txt 2>/dev/null
for S in 2048 32768; do OUT=$R/pool timeout 60 python3 ci/gpu/scalar_pool.py key_ranges $S > $R/pool/key_ranges_$S.log 2>&1; done
for S in 2048 32768; do timeout 60 python3 ci/key_ranges_check.py $S > $R/pool/check_$S.log 2>&1; done
OUT=$R/pool timeout 40 python3 ci/gpu/scalar_pool.py 1 2048 > $R/pool/scalars_1_2048.log 2>&1
OUT=$R/pool timeout 40 python3 ci/gpu/small_grid_bandwidth.py --mb 8 --grids 16,64 --forms loads:1,cp.async:4 > $R/pool/small_grid.log 2>&1
tail -n 4 $R/pool/*.log
date -u >> $R/times.txt
OUT=$R/verify SUITE_TESTS="tests/property tests/parity" SUITE_S=420 TEST_S=400 ci/gpu/h200-session.sh verify
date -u >> $R/times.txt; cat $R/times.txt
gzip -f $R/verify/suite.log
tar -czf $OUT/call97.tgz -C $OUT r && rm -rf $R
