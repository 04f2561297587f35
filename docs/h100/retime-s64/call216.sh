#!/usr/bin/env bash
# Call 216 (run 2026-12-06 04:14 UTC, on an H100, before 215 on the same machine): the property and parity suites with
# --backend cuda on the tip's package (metal/ as in 646f822; since the last H200 run only
# fusedattend/bench.py changed).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
python3 -m fusedattend.chip > $OUT/device_info.txt; date -u > $OUT/times.txt
SUITE_TESTS="tests/property tests/parity" SUITE_S=500 ci/gpu/h200-session.sh verify
echo "verify rc=$?" >> $OUT/times.txt; date -u >> $OUT/times.txt
gzip $OUT/suite.log; cat $OUT/times.txt
