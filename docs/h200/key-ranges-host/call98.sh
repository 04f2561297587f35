# Call 98: kernel and replay tests with --backend cuda on the tip, then ci/perf.sh compare against
# the H200 baseline 0030 (the first compare against it)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
R=$OUT/r; mkdir -p $R/verify $R/compare; date -u > $R/times.txt; md5sum metal/* > $R/metal.md5
OUT=$R/verify SUITE_TESTS="tests/kernels tests/test_replay.py" SUITE_S=240 TEST_S=220 ci/gpu/h200-session.sh verify
gzip -f $R/verify/suite.log
date -u >> $R/times.txt
timeout 300 ci/perf.sh compare --backend cuda > $R/compare/compare.log 2>&1; echo "compare rc=$?" >> $R/compare/compare.log
tail -60 $R/compare/compare.log
date -u >> $R/times.txt; cat $R/times.txt
tar -czf $OUT/call98.tgz -C $OUT r && rm -rf $R
