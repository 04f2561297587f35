#!/usr/bin/env bash
# Call 168, right after 167 (run as this one command line): tests/perf's padded decode-loop rows,
# which now pass one KeyRanges.from_padding a loop, each against MLX's SDPA with the equivalent
# mask in the same run. A first try without -m perf skipped every row (22 s).
export PYTHONPATH=$PWD; date -u; timeout 150 python3 -m pytest tests/perf -m perf -p no:xdist -p no:cacheprovider --backend cuda -q -k "padded" --benchmark-json=$OUT/padded.json > $OUT/padded.log 2>&1; echo "padded rc $?"; python3 -c "
import json
for b in json.load(open('$OUT/padded.json'))['benchmarks']:
    i = b['extra_info']; print(b['name'], round(b['stats']['median'] / i['calls_per_round'] * 1e6, 1), 'us a step,', round(i['ratio_mx.fast.sdpa'], 2), 'x MLX')
"; date -u; tail -2 $OUT/padded.log
