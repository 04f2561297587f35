"""fusedattend.benchmarks.targets: the speed targets from a sweep's results, on made-up runs whose
answers are known, and on the committed GPU results (docs/performance.md prints them)."""

import json
import subprocess
import sys

import pytest

from fusedattend.benchmarks import performance_page
from fusedattend.benchmarks import targets as bench_targets

SHAPES = [(1, 512), (1, 8192), (32, 8192), (32, 32768)]
GPU_RESULTS = sorted(p for p in performance_page.RESULTS.glob("*.json") if not p.name.startswith("cpu-"))


def made_up_run(ours=100.0, mlx=130.0, torch=105.0, q4=10.0, mlx_lm=100.0, bandwidth=4000.0, big_gbps=3500.0,
                slow_shape=None):
    """Every shape: ours and each peer take the times given (mx.fast.sdpa 80 µs at slow_shape);
    at the big shape ours reads big_gbps (bf16) and big_gbps / 4 (q4)."""
    results = []
    for B, S in SHAPES:
        big = (B, S) == bench_targets.BIG
        peers = {"mx.fast.sdpa": 80.0 if (B, S) == slow_shape else mlx, "torch.sdpa": torch}
        results.append(dict(format="bfloat16", impl="cuda", B=B, S=S, us=ours, gbps=big_gbps if big else 1.0))
        results += [dict(format="bfloat16", impl=p, B=B, S=S, us=t, gbps=1.0) for p, t in peers.items() if t]
        results.append(dict(format="q4", impl="cuda", B=B, S=S, us=q4, gbps=big_gbps / 4 if big else 1.0))
        results.append(dict(format="q4", impl="mlx_lm.qsdpa", B=B, S=S, us=mlx_lm, gbps=1.0))
    return {"meta": {"memory_read_gbps": bandwidth}, "results": results}


def met(run):
    return {name: ok for name, _, ok in bench_targets.targets(run)}


def test_targets_met_and_missed():
    hit = met(made_up_run())
    assert hit["bf16 ≥ 1.3x mx.fast.sdpa (geometric mean), never slower"] is True
    assert hit["bf16 within 10% of torch SDPA at every shape"] is True  # 100 against 105
    assert hit["bf16 ≥ 85% of read bandwidth at B = 32, S = 32768"] is True  # 3500 of 4000
    assert hit["q4 ≥ 10x mlx_lm"] is True
    assert hit["q4 ≥ 3x bf16 mx.fast.sdpa at S ≥ 8192"] is True  # 130 against 10
    assert hit["q4 ≥ 80% of the quantized-bytes roofline"] is False  # 875 of 4000
    miss = met(made_up_run(torch=90.0, big_gbps=3300.0, mlx_lm=99.0, slow_shape=(1, 8192)))
    assert miss["bf16 ≥ 1.3x mx.fast.sdpa (geometric mean), never slower"] is False  # 0.8x at one shape
    assert miss["bf16 within 10% of torch SDPA at every shape"] is False  # 100 against 90: 11% slower
    assert miss["bf16 ≥ 85% of read bandwidth at B = 32, S = 32768"] is False  # 82.5%
    assert miss["q4 ≥ 10x mlx_lm"] is False  # 9.9x
    assert miss["q4 ≥ 3x bf16 mx.fast.sdpa at S ≥ 8192"] is True  # 80 / 10 where MLX is fast
    assert met(made_up_run(mlx=25.0))["q4 ≥ 3x bf16 mx.fast.sdpa at S ≥ 8192"] is False  # 2.5x
    never_slower = "bf16 ≥ 1.3x mx.fast.sdpa (geometric mean), never slower"
    assert met(made_up_run(mlx=200.0, slow_shape=(1, 8192)))[never_slower] is False  # 1.59x, but 0.8x once
    short_fast = made_up_run()
    next(r for r in short_fast["results"] if r["impl"] == "mx.fast.sdpa" and r["S"] == 512)["us"] = 20.0
    assert met(short_fast)["q4 ≥ 3x bf16 mx.fast.sdpa at S ≥ 8192"] is True  # 2x at S = 512 does not count


def test_a_run_without_torch_says_so():
    run = made_up_run(torch=None)
    measured = {name: (text, ok) for name, text, ok in bench_targets.targets(run)}
    assert measured["bf16 within 10% of torch SDPA at every shape"] == ("torch not timed", None)
    assert "| 1 | 512 | 100.0 | 130.0 | - | 1.30x | - |" in bench_targets.report(run)


def test_a_run_short_of_rows_is_named():
    run = made_up_run()
    run["results"] = [r for r in run["results"] if r["impl"] != "mlx_lm.qsdpa" or r["S"] != 512]
    with pytest.raises(ValueError, match="mlx_lm.qsdpa"):
        bench_targets.targets(run)
    run = made_up_run()
    run["results"] = [r for r in run["results"] if (r["B"], r["S"]) != bench_targets.BIG]
    with pytest.raises(ValueError, match="S = 32768"):
        bench_targets.targets(run)


def test_geometric_means_in_the_table():
    run = made_up_run()
    run["results"][0]["us"] = 400.0  # ours at B = 1, S = 512: 0.325x MLX; the others 1.3x
    table = bench_targets.report(run)
    assert "| 1 | 512 | 400.0 | 130.0 | 105.0 | 0.33x | 0.26x |" in table
    assert f"| geometric mean | | | | | {(0.325 * 1.3 ** 3) ** 0.25:.2f}x |" in table


def test_there_are_gpu_results():
    assert {p.stem for p in GPU_RESULTS} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}


@pytest.mark.parametrize("path", GPU_RESULTS, ids=lambda p: p.stem)
def test_committed_results_report(path):
    out = subprocess.run([sys.executable, "-m", "fusedattend.benchmarks.targets", str(path)],
                         capture_output=True, text=True, check=True).stdout
    shapes = {(row[1], row[2]) for row in json.loads(path.read_text())["rows"]}
    # a row a shape and the mean row; the targets' header and six targets (the first line, the
    # shapes' header, is not after a newline; rules start "|---")
    assert out.count("\n| ") == len(shapes) + 1 + 1 + 6


@pytest.mark.parametrize("chip, bf16, q4", [
    ("nvidia-h200", "1.03x geometric mean, 0.77–1.58x", "1.95–9.75x, 3.88x geometric mean"),
    ("nvidia-h100-80gb-hbm3", "1.02x geometric mean, 0.80–1.71x", "1.82–9.57x, 3.98x geometric mean"),
])
def test_the_committed_results(chip, bf16, q4):
    """The compact results read as the full runs they came from did (the numbers of those runs)."""
    run = performance_page.expand(json.loads((performance_page.RESULTS / f"{chip}.json").read_text()))
    measured = {name: text for name, text, _ in bench_targets.targets(run)}
    assert measured["bf16 ≥ 1.3x mx.fast.sdpa (geometric mean), never slower"] == bf16
    assert measured["q4 ≥ 10x mlx_lm"] == q4
