#!/usr/bin/env bash
# Call 192 (2026-12-04), after staging (carry .gpu/p1..p3 with `bash ci/gpu/stage-parts.sh receive
# .gpu/pN`, then .gpu/p4 with `receive .gpu/p4 && install >/dev/null && bash
# docs/h200/host-pieces/call192.sh`): the host-side changes of this session with --backend cuda
# (a numpy scalar scale; the bench CLI's checks), then where a queued call's build goes
# (ci/gpu/build_pieces.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c 'import mlx.core' || exit 3
date -u > $OUT/times.txt; md5sum metal/* fusedattend/*.py | sort -k2 > $OUT/md5.txt
timeout 200 python3 -m pytest tests/test_api.py tests/test_cli.py tests/test_replay.py tests/property/test_invalid_inputs.py \
  --backend cuda -q -n 8 -p no:cacheprovider > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/times.txt
tail -3 $OUT/tests.log
date -u >> $OUT/times.txt
timeout 300 python3 ci/gpu/build_pieces.py 1 512 1 2048 8 2048 32 32768 > $OUT/build_pieces.jsonl 2> $OUT/build_pieces.err
echo "pieces rc=$?" >> $OUT/times.txt; date -u >> $OUT/times.txt
cat $OUT/build_pieces.jsonl; tail -5 $OUT/build_pieces.err; cat $OUT/times.txt
