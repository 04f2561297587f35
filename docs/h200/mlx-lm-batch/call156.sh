#!/usr/bin/env bash
# Call 156, right after 155 on the same machine (run as one command line): the 4-bit case again
# (call 155's had failed on mlx_lm's quantized attention), attention_build_cost.py now timing
# fusedattend alone there.
PYTHONPATH=$PWD timeout 150 python3 docs/h200/mlx-lm-batch/attention_build_cost.py 2048 --quantized \
  > $OUT/build_2048_--quantized.log 2>&1
