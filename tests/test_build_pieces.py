"""ci/gpu/build_pieces.py runs anywhere with its kernels stubbed: each variant a line, the merge's
call only where S is split (the H200's numbers: docs/h200/host-pieces/)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_build_pieces_stubbed():
    out = subprocess.run([sys.executable, str(ROOT / "ci/gpu/build_pieces.py"), "--stub", "--rounds", "1",
                          "--cold-mb", "0", "1", "64", "1", "1024"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    variants = {}
    for r in rows:
        variants.setdefault((r["S"], r["fmt"]), set()).add(r["variant"])
    for fmt in ("bfloat16", "q4"):
        assert {"public call", "replay", "kernel calls"} <= variants[(64, fmt)]
        assert "decode call" not in variants[(64, fmt)]  # one launch up to 512 keys
        assert "decode call" in variants[(1024, fmt)]
    assert all(r["build_us"] > 0 for r in rows)
