"""The cpu backend against mx.fast.scaled_dot_product_attention on mx.cpu, quiet and with a second
process loading every core (`python -m fusedattend cpu-contention`). Reports both ratios
(goal: >= 4x, f32 and bf16, S >= 1024).

    python -m pytest tests/perf/test_cpu_contention.py -m perf -p no:xdist -q -s
"""

from pathlib import Path

import pytest

import fusedattend as fa
from fusedattend.benchmarks import cpu_contention as bench

pytestmark = pytest.mark.skipif("cpu" not in fa.available_backends(), reason="cpu backend unavailable")


@pytest.mark.perf
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cpu_backend_against_mlx_cpu_attention_quiet_and_loaded(dtype, record_property):
    rows = bench.measure(dtypes=(dtype,), S_list=(1024, 4096), repeats=7, load_seconds=120)
    print("\n" + bench.format_table(rows))
    for row in rows:
        record_property(f"ratio_{row['condition']}_S{row['S']}", round(row["ratio"], 2))
    # The goal (bench.GOAL) is reported, not asserted: where it stands per chip is the decision
    # page's (docs/decisions/cpu-one-level-of-threads.md). What fails here is the collapse the
    # one level of threads removed: the cpu backend slower than MLX's own CPU attention. A shared
    # runner can stall one sample set, so a row under 1x is timed once more before it fails.
    for row in rows:
        if row["ratio"] < 1.0:
            again = bench.measure(dtypes=(dtype,), S_list=(row["S"],), repeats=7,
                                  conditions=(row["condition"],), load_seconds=60)
            print(bench.format_table(again))
            assert again[0]["ratio"] >= 1.0, again[0]


@pytest.mark.smoke
def test_smoke_loader_starts_stops_and_rows_come_back():
    with bench.loaded_cores(1, seconds=30) as loader:
        pid = loader.pid
        assert Path(f"/proc/{pid}").exists() or not Path("/proc").is_dir()
    assert loader.wall_s is not None and loader.wall_s < 30
    if Path("/proc").is_dir():
        assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    rows = bench.measure(dtypes=("float32", "bfloat16"), S_list=(64,), B=1, H_q=4, H_kv=2, D=32,
                         repeats=2, load_seconds=30)
    assert [(r["condition"], r["dtype"]) for r in rows] == [
        ("quiet", "float32"), ("quiet", "bfloat16"), ("loaded", "float32"), ("loaded", "bfloat16")]
    assert all(r["cpu_ms"] > 0 and r["mx.fast_ms"] > 0 and r["ratio"] > 0 for r in rows)
    assert rows[-1]["loader_cores"] >= 1
    assert "goal" in bench.format_table(rows)
