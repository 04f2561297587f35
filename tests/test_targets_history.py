"""ci/targets_history.py: each run's row says what ci/bench_targets.py says of that run, in date
order, and every committed H200 run has one."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci"))
import targets_history  # noqa: E402
from tests.test_bench_targets import H200_RUNS, made_up_run  # noqa: E402


def test_a_row_reads_the_run():
    run = made_up_run(torch=90.0, slow_shape=(1, 8192))  # MLX 130 µs but 80 at one shape; ours 100
    run["meta"].update(date="2026-12-01T10:00:00", cold_mb=200, chain=False)
    row = targets_history.history_row(run)
    assert row["kind"] == "cold"
    assert row["bf16_vs_mlx"] == pytest.approx((1.3 ** 3 * 0.8) ** 0.25)
    assert row["bf16_vs_mlx_min"] == pytest.approx(0.8)
    assert row["torch_near"] == 0  # 100 against 90 at every shape: 11% slower
    assert row["bf16_bandwidth"] == pytest.approx(87.5)  # 3500 of 4000 GB/s
    assert row["q4_vs_mlx_lm_big"] == pytest.approx(10.0) and row["q4_vs_mlx_lm"] == pytest.approx(10.0)
    assert row["q4_vs_mlx_long"] == pytest.approx(8.0)  # MLX's 80 µs at S = 8192 against 10
    assert row["q4_roofline"] == pytest.approx(100 * 875 / 4000)
    run["meta"]["chain"] = True
    assert targets_history.history_row(run)["kind"] == "chained"
    del run["meta"]["cold_mb"], run["meta"]["chain"]
    assert targets_history.history_row(run)["kind"] == "warm"
    assert targets_history.history_row(made_up_run(torch=None))["torch_near"] is None


def test_every_committed_run_in_date_order():
    """The tool's default runs are the committed ones that test_bench_targets reads, each a row."""
    assert targets_history.committed_runs() == H200_RUNS
    rows = targets_history.history(targets_history.committed_runs())
    assert len(rows) == len(H200_RUNS)
    assert [r["date"] for r in rows] == sorted(r["date"] for r in rows)
    table = targets_history.table(rows)
    assert table.count("\n| 20") == len(rows)  # a row a run, each starting with its date


def test_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    rows = targets_history.history(H200_RUNS[:3])
    targets_history.plot(rows, tmp_path / "history.png")
    assert (tmp_path / "history.png").read_bytes().startswith(b"\x89PNG")
