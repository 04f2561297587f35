#!/usr/bin/env bash
# Call 227 (written 2026-12-06), after calls 225-226 on the same lease if time allows: the property
# and parity suites with --backend cuda on the tip's package (metal/ as in 646f822), by
# docs/h100/retime-s64/call216.sh as it is (it ran them on an H100), beside the files' md5 list.
md5sum metal/* fusedattend/*.py tests/property/*.py tests/parity/*.py tests/oracle.py conftest.py | sort -k2 > $OUT/md5.txt
bash docs/h100/retime-s64/call216.sh
