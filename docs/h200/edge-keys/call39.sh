#!/usr/bin/env bash
# the stage's one PITCH (was K_PITCH = V_PITCH) and the GPU block-edge test on keys that weigh much at the edges:
# SASS against HEAD's metal/ ∥ the suites ∥ memcheck ∥ racecheck (split_mma set: S = 32769 in 2048-key blocks);
# then the block-edge tests on a copy whose decode_mma.metal blocks end one tile short (must fail; random keys may not)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/suite $R/san
md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
( timeout 400 python3 ci/gpu/sass_same.py ab_run/old_metal > $R/sass_same.log 2>&1; echo "sass_same rc=$?" >> $R/sass_same.log ) &
( OUT=$R/suite SUITE_TESTS="tests/property tests/kernels/test_gpu_schedule.py tests/parity" SUITE_S=400 TEST_S=380 ci/gpu/h200-session.sh verify > $R/verify.out 2>&1; date -u >> $R/times.txt ) &
( OUT=$R/san SANITIZER_MMA_S=440 SANITIZER_TOOLS=memcheck SANITIZER_SETS="layouts split_mma" ci/gpu/h200-session.sh sanitize > $R/san-memcheck.out 2>&1; date -u >> $R/times.txt ) &
( OUT=$R/san SANITIZER_MMA_S=440 SANITIZER_TOOLS=racecheck SANITIZER_SETS="layouts split_mma" ci/gpu/h200-session.sh sanitize > $R/san-racecheck.out 2>&1; date -u >> $R/times.txt ) &
( rm -rf /tmp/mut && mkdir /tmp/mut && cp -r conftest.py pyproject.toml fusedattend metal tests /tmp/mut/ && cd /tmp/mut &&
  sed -i 's/const int hi = metal::min(block \* block_keys + block_keys, key_end);/const int hi = metal::min(block * block_keys + block_keys - 16, key_end);/' metal/decode_mma.metal &&
  grep -n "block_keys - 16" metal/decode_mma.metal > $R/mutation.log &&
  sleep 200 && MLX_PTX_CACHE_DIR=/tmp/ptx-mut PYTHONPATH=/tmp/mut timeout 150 python3 -m pytest tests/kernels/test_gpu_schedule.py --backend cuda -n 4 -q -p no:cacheprovider \
    -k "block_edges and not quantized and (bfloat16 or weigh_much)" -rf --tb=line >> $R/mutation.log 2>&1; echo "mutation rc=$?" >> $R/mutation.log ) &
wait
cat $R/times.txt $R/verify.out $R/san-*.out; tail -n 4 $R/sass_same.log; grep -E "^FAILED|passed|failed|rc=" $R/mutation.log | cut -c1-160
grep -cE "PASSED.*32769" $R/suite/suite.log; grep -cE "PASSED.*weigh_much" $R/suite/suite.log
tar -czf $OUT/call39.tgz -C $OUT r && rm -rf $R
