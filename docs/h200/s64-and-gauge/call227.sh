#!/usr/bin/env bash
# Call 227 (written 2026-12-06), after calls 225-226 on the same lease if time allows: the property
# and parity suites with --backend cuda on the tip's package (metal/ as in 646f822), as
# docs/h100/retime-s64/call216.sh ran them on an H100.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusedattend.chip > $OUT/device_info.txt || exit 3; cat $OUT/device_info.txt
date -u > $OUT/times.txt
md5sum metal/* fusedattend/*.py tests/property/*.py tests/parity/*.py tests/oracle.py conftest.py | sort -k2 > $OUT/md5.txt
SUITE_TESTS="tests/property tests/parity" SUITE_S=500 ci/gpu/h200-session.sh verify
echo "verify rc=$?" >> $OUT/times.txt; date -u >> $OUT/times.txt
gzip $OUT/suite.log; cat $OUT/times.txt
