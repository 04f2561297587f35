"""ci/row_history.py: a row's readings across a chip's baselines and extra runs."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci/row_history.py"


def write_run(path, rows):
    """rows: name -> median seconds a round of 20 queued calls."""
    path.parent.mkdir(parents=True, exist_ok=True)
    benchmarks = [{"name": n, "stats": {"median": m}, "extra_info": {"calls_per_round": 20}} for n, m in rows.items()]
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    return path


def run(*args):
    result = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def test_rows_by_run_in_baseline_order_then_files(tmp_path):
    chip = tmp_path / "chip"
    write_run(chip / "Linux" / "0002_chip.json", {"loop[S64-q4]": 1.3e-3, "loop[S64-bf16]": 0.6e-3})
    write_run(chip / "Linux" / "0001_chip.json", {"loop[S64-q4]": 0.8e-3, "other": 1.0})
    extra = write_run(tmp_path / "run.json", {"loop[S64-bf16]": 0.5e-3})
    code, out, _ = run("S64", chip, extra)
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "| run | `loop[S64-bf16]` | `loop[S64-q4]` |"
    assert lines[2] == "| chip 0001 | - | 40.0 |"  # per call: 0.8 ms a round / 20
    assert lines[3] == "| chip 0002 | 30.0 | 65.0 |"
    assert lines[4] == f"| {extra} | 25.0 | - |"
    assert "other" not in out


def test_no_matching_row_or_path_is_an_error(tmp_path):
    run_json = write_run(tmp_path / "run.json", {"a": 1e-3})
    code, _, err = run("S64", run_json)
    assert code != 0 and "no row's name holds 'S64'" in err
    code, _, err = run("a", tmp_path / "missing.json")
    assert code != 0 and "no such file or folder" in err
