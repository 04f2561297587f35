#!/usr/bin/env bash
# the block-edge tests on weighty keys, plain and quantized (2-, 4-, 8-bit), on the tip and on a copy whose
# decode_mma.metal blocks end one tile short, beside the random-key tests (test_block_edges bf16, test_quantized_block_edges)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R; md5sum metal/* > $R/metal.md5; date -u > $R/times.txt
sel="weigh_much or quantized_block_edges or (test_block_edges and dtype2)"
timeout 200 python3 -m pytest tests/kernels/test_gpu_schedule.py --backend cuda -n 8 -v -p no:cacheprovider -k "$sel" -rf --tb=short > $R/edges.log 2>&1; echo "edges rc=$?" >> $R/edges.log; date -u >> $R/times.txt
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r conftest.py pyproject.toml fusedattend metal tests /tmp/mut/ && cd /tmp/mut &&
  sed -i 's/const int hi = metal::min(block \* block_keys + block_keys, key_end);/const int hi = metal::min(block * block_keys + block_keys - 16, key_end);/' metal/decode_mma.metal &&
  grep -n "block_keys - 16" metal/decode_mma.metal > $R/mutation.log &&
  MLX_PTX_CACHE_DIR=/tmp/ptx-mut2 PYTHONPATH=/tmp/mut timeout 200 python3 -m pytest tests/kernels/test_gpu_schedule.py --backend cuda -n 8 -v -p no:cacheprovider \
    -k "$sel" -rf --tb=line >> $R/mutation.log 2>&1; echo "mutation rc=$?" >> $R/mutation.log; date -u >> $R/times.txt
cd - >/dev/null
cat $R/times.txt; tail -n 2 $R/edges.log; grep -E "^[0-9]+ (passed|failed)|passed|failed" $R/mutation.log | tail -1
grep -E "\] (PASSED|FAILED) " $R/mutation.log | sed -E 's/.*\] (PASSED|FAILED) .*::(test_[a-z_]+)\[cuda-(.*)\].*/\2 \3 \1/' | sort | awk '{print $1, $2, $3}' | tr '\n' ';'; echo
tar -czf $OUT/call43.tgz -C $OUT r && rm -rf $R
