#!/usr/bin/env bash
# 86f4f89: block_edge_case weighed by S and D; the GPU block-edge tests on the tip and on a copy whose
# decode_mma.metal blocks end one tile short (random bf16 keys and the edge keys side by side); SASS of the one-PITCH stage
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
( timeout 420 python3 ci/gpu/sass_same.py ab_run/old_metal > $R/sass_same.log 2>&1; echo "sass_same rc=$?" >> $R/sass_same.log; date -u >> $R/times.txt ) &
sel='block_edges and not quantized'
timeout 200 python3 -m pytest tests/kernels/test_gpu_schedule.py --backend cuda -n 6 -v -p no:cacheprovider -k "$sel or lost_edge" -rf --tb=short > $R/edges.log 2>&1; echo "edges rc=$?" >> $R/edges.log; date -u >> $R/times.txt
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r conftest.py pyproject.toml fusedattend metal tests /tmp/mut/ && cd /tmp/mut &&
  sed -i 's/const int hi = metal::min(block \* block_keys + block_keys, key_end);/const int hi = metal::min(block * block_keys + block_keys - 16, key_end);/' metal/decode_mma.metal &&
  grep -n "block_keys - 16" metal/decode_mma.metal > $R/mutation.log &&
  MLX_PTX_CACHE_DIR=/tmp/ptx-mut PYTHONPATH=/tmp/mut timeout 200 python3 -m pytest tests/kernels/test_gpu_schedule.py --backend cuda -n 6 -v -p no:cacheprovider \
    -k "$sel and (dtype2 or weigh_much)" -rf --tb=line >> $R/mutation.log 2>&1; echo "mutation rc=$?" >> $R/mutation.log; date -u >> $R/times.txt
cd - >/dev/null; wait
cat $R/times.txt; tail -n 3 $R/edges.log; grep -E "^(PASSED|FAILED)|passed|failed" $R/mutation.log | sort | uniq -c | sort -rn | head -3
grep -E "(PASSED|FAILED).*test_block_edges\[" $R/mutation.log | sed -E 's/.*(PASSED|FAILED).*-([0-9]+)-([a-z_]+)\].*/\1 \2 \3/' | sort -k2n | tr '\n' ';'; echo
grep -E "(PASSED|FAILED).*weigh_much" $R/mutation.log | sed -E 's/.*(PASSED|FAILED).*-([0-9]+)-([a-z_]+)\].*/\1 \2 \3/' | sort -k2n | tr '\n' ';'; echo
tail -n 6 $R/sass_same.log
tar -czf $OUT/call41.tgz -C $OUT r && rm -rf $R
