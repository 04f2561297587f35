"""The committed per-chip baselines: one a chip (the newest; ci/perf.sh compare reads it), complete and
readable by fusedattend.benchmarks.baseline_table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINES = sorted((ROOT / "tests/perf/baselines").glob("*/*/*.json"))


def test_there_are_baselines():
    chips = {p.parts[-3] for p in BASELINES}
    assert {"cpu-amd-epyc-2c", "nvidia-h200", "nvidia-h100-80gb-hbm3"} <= chips
    assert len(chips) == len(BASELINES), "one baseline a chip: git history keeps the older ones"


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: p.parts[-3])
def test_baseline_has_every_format_and_a_peer_ratio(path):
    runs = [b["extra_info"] for b in json.loads(path.read_text())["benchmarks"]]
    assert {e["format"] for e in runs} == {"bfloat16", "q4"}
    assert all(e["gbps"] > 0 and any(k.startswith("ratio_") for k in e) for e in runs)
    table = subprocess.run([sys.executable, "-m", "fusedattend.benchmarks.baseline_table", str(path)],
                           capture_output=True, text=True, check=True).stdout
    # (padded, evaluated) decode loops and mlx_lm model steps (by kind of cache) apart
    groups = {(e["backend"], e["format"], "grows_by" in e, "pads" in e, "each_step" in e, e.get("kind")) for e in runs}
    assert table.count("\n| ") == len(runs) + 2 * len(groups)  # + header and mean row per table
