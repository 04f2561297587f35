"""Smoke tests of tools/ (outside the default run): python -m pytest tools/tests -p no:cacheprovider."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import sass_stats  # noqa: E402

from fusedattend.gpu import schedule  # noqa: E402


def run_tool(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout


def row(var, B, S, us, q4_us, mlx_us):
    return dict(var=var, B=B, S=S, us=us, q4_us=q4_us, mlx_us=mlx_us, GBs=0, vs_mlx=0, err=0)


def test_sweep_summary_a_line_per_shape_in_the_variants_order(tmp_path):
    rows = [row({}, 1, 2048, 25.3, 0.0, 24.0), row({"max_block": 2048}, 1, 2048, 21.0, 0.0, 24.0),
            row({}, 32, 32768, 1041.6, 0.0, 990.1), row({"max_block": 2048}, 32, 32768, 1014.9, 0.0, 990.1)]
    log = tmp_path / "sweep.log"
    log.write_text("mlx 0.32.4\n" + "".join(json.dumps(r) + "\n" for r in rows) + "done\n")
    out = run_tool("tools/schedule_sweep.py", "--summary", str(log)).splitlines()
    assert out[0].split("variants: ")[1] == '{}  {"max_block": 2048}'
    assert out[1].split() == ["1", "2048", "24.0", "25.3", "21.0"]
    assert out[2].split() == ["32", "32768", "990.1", "1041.6", "1014.9"]
    assert len(out) == 3


def test_sass_stats_set_takes_policy_fields():
    policy = sass_stats.policy_of(["simdgroups=8", "stage_on_metal=true"])
    assert policy == schedule.Policy(simdgroups=8, stage_on_metal=True)
    for bad in ("SIMDGROUPS=8", "simdgroups", "simdgroups=-1", "stage_on_metal=2"):
        with pytest.raises(SystemExit):
            sass_stats.policy_of([bad])


@pytest.mark.parametrize("tool", ["sass_stats.py", "schedule_sweep.py", "sass_same.py"])
def test_help(tool):
    assert "usage:" in run_tool(f"tools/{tool}", "--help")


def test_sweep_variants_put_each_policy_in_force(monkeypatch, tmp_path):
    import schedule_sweep

    from fusedattend.gpu import sources

    monkeypatch.delenv(schedule.SCHEDULE_ENV, raising=False)  # restored after the test
    monkeypatch.setattr(sources, "kernel_dir", sources.kernel_dir)
    shipped = sources.kernel_dir()
    variants = schedule_sweep.Variants([{}, {"simdgroups": 8}, {"metal": str(tmp_path), "max_block": 2048}], tmp_path)
    seen = []
    for i in (1, 2, 0):
        variants.use(i)
        policy = schedule.current_policy()
        seen.append((policy.simdgroups, policy.max_block, sources.kernel_dir()))
    assert seen == [(8, 1024, shipped), (4, 2048, tmp_path), (4, 1024, shipped)]
    with pytest.raises(ValueError, match="SIMDGROUPS"):
        schedule_sweep.Variants([{"SIMDGROUPS": 8}], tmp_path)


def test_conformance_summary_from_the_committed_reports(tmp_path):
    """conformance_reports.py --summary-only rebuilds the table from the JSON reports it finds."""
    import shutil

    for path in (ROOT / "docs" / "conformance").glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    run_tool("tools/conformance_reports.py", "--summary-only", "--out", str(tmp_path))
    text = (tmp_path / "README.md").read_text()
    assert "| parity |" in text and "[mx-fast-sdpa-cpu](mx-fast-sdpa-cpu.md)" in text
    assert "a fully masked row is the mean of V over all keys" in text
