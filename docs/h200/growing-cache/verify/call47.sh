#!/usr/bin/env bash
# a growing cache replayed (S left out of the signature; launches per schedule): decode-loop timing new vs cabda0b's package,
# then the suites with the growing-cache test ∥ memcheck over it
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite $R/old
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
for bs in "1 4096" "8 4096" "32 16384"; do
  echo "== new $bs"; OUT=$R timeout 100 python3 ci/gpu/decode_loop.py $bs
  echo "== old (cabda0b) $bs"; OUT=$R/old PYTHONPATH=$PWD/ab_oldpkg timeout 100 python3 ci/gpu/decode_loop.py $bs
done > $R/decode_loop.log 2>&1
date -u >> $R/times.txt
( OUT=$R/suite SUITE_TESTS="tests/property tests/kernels/test_gpu_schedule.py tests/kernels/test_growing_cache.py tests/parity tests/test_replay.py" SUITE_S=330 TEST_S=320 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1; date -u >> $R/times.txt ) &
( sleep 5; timeout 200 compute-sanitizer --tool memcheck python3 -m pytest tests/kernels/test_growing_cache.py --backend cuda -q -p no:cacheprovider > $R/memcheck.log 2>&1; echo "memcheck rc=$?" >> $R/memcheck.log ) &
wait
cat $R/decode_loop.log $R/times.txt $R/verify.out; grep -E "ERROR SUMMARY|passed|failed|rc=" $R/memcheck.log
grep -E "growing|replay" $R/suite/suite.log | grep -cE "PASSED"
tar -czf $OUT/call47.tgz -C $OUT r && rm -rf $R
