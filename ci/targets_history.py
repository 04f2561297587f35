"""Issue 5's speed targets over every committed H200 benchmark run, as one table and one plot:
what ci/bench_targets.py says of each run, a row a run in the order they were taken.

    python ci/targets_history.py                      # the table (markdown), docs/h200's runs
    python ci/targets_history.py --plot docs/h200/targets-history.png
    python ci/targets_history.py RUN.json ...         # other runs

A run's kind: "cold" (K/V out of L2: --cold-mb, calls queued), "chained" (--cold-mb and --chain:
each call's query the previous output) or "warm" (K/V may sit in L2). Only runs of the same kind
compare: the targets are read from cold runs; chained ones show the same kernels one call after
another. Ratios are a peer's time over ours, from the same run (ci/bench_targets.py).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_targets  # noqa: E402
from bench_targets import BIG, geomean  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("cold", "chained", "warm")
# (column, what it is, the target's value: a line on its panel)
COLUMNS = (
    ("bf16_vs_mlx", "bf16 vs mx.fast.sdpa, geometric mean", 1.3),
    ("bf16_vs_mlx_min", "bf16 vs mx.fast.sdpa, slowest shape", 1.0),
    ("torch_near", "shapes within 10% of torch (of 12)", 12),
    ("bf16_bandwidth", f"bf16 % of read bandwidth, B = {BIG[0]}, S = {BIG[1]}", 85),
    ("q4_vs_mlx_lm_big", f"q4 vs mlx_lm at B = {BIG[0]}, S = {BIG[1]}", 10),
    ("q4_vs_mlx_lm", "q4 vs mlx_lm, geometric mean", 10),
    ("q4_vs_mlx_long", f"q4 vs bf16 mx.fast.sdpa, slowest shape at S ≥ {bench_targets.LONG_S}", 3),
    ("q4_roofline", f"q4 % of the quantized bytes' roofline, B = {BIG[0]}, S = {BIG[1]}", 80),
)


def run_kind(meta) -> str:
    if meta.get("chain"):
        return "chained"
    return "cold" if meta.get("cold_mb") else "warm"


def history_row(run, path="") -> dict:
    """What a run measured of each target (COLUMNS), with its date, kind and path."""
    rows = bench_targets.shape_rows(run)
    ratios = bench_targets.ratio_columns(rows)
    bf16_gbps, q4_gbps = bench_targets.big_shape_gbps(run)
    bandwidth = run["meta"]["memory_read_gbps"]
    big = next(r for r in rows if (r["B"], r["S"]) == BIG)
    torch = ratios["vs_torch"]
    return dict(
        date=run["meta"].get("date", ""), kind=run_kind(run["meta"]), path=str(path),
        bf16_vs_mlx=geomean(ratios["vs_mlx"]), bf16_vs_mlx_min=min(ratios["vs_mlx"]),
        torch_near=bench_targets.near_torch(torch) if torch else None,
        bf16_bandwidth=100 * bf16_gbps / bandwidth,
        q4_vs_mlx_lm_big=big["mlx_lm"] / big["q4"], q4_vs_mlx_lm=geomean(ratios["q4_vs_lm"]),
        q4_vs_mlx_long=min(ratios["q4_vs_mlx"]), q4_roofline=100 * q4_gbps / bandwidth)


def history(paths) -> list:
    """history_row of each run, by date."""
    rows = [history_row(json.loads(Path(p).read_text()), p) for p in paths]
    return sorted(rows, key=lambda r: r["date"])


def committed_runs():
    return sorted((ROOT / "docs/h200").rglob("bench*.json"))


def table(rows) -> str:
    def cell(value):
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    head = ["date", "kind", *(c for c, _, _ in COLUMNS), "run"]
    lines = ["Issue 5's targets in each H200 run (`python ci/targets_history.py`; kinds and columns: its docstring)",
             "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        path = Path(r["path"])
        shown = path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path
        lines.append("| " + " | ".join([r["date"], r["kind"], *(cell(r[c]) for c, _, _ in COLUMNS), str(shown)]) + " |")
    lines += ["", "Targets: " + "; ".join(f"{c} ≥ {t}" for c, _, t in COLUMNS)]
    return "\n".join(lines)


def plot(rows, path):
    """A panel a column: each kind's runs in date order, the target as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from datetime import datetime

    fig, axes = plt.subplots(4, 2, figsize=(12, 12), sharex=True)
    markers = {"cold": "o", "chained": "s", "warm": "^"}
    for ax, (column, title, target) in zip(axes.flat, COLUMNS):
        for kind in KINDS:
            points = [(datetime.fromisoformat(r["date"]), r[column]) for r in rows
                      if r["kind"] == kind and r[column] is not None and r["date"]]
            if points:
                ax.plot(*zip(*points), marker=markers[kind], linestyle="-" if kind == "cold" else ":",
                        markersize=4, label=kind)
        ax.axhline(target, color="k", linestyle="--", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.autofmt_xdate()
    fig.suptitle("Issue 5's targets in every committed H200 run (dashed: the target)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", help="benchmark JSON files (default: every docs/h200/**/bench*.json)")
    p.add_argument("--plot", metavar="PNG", help="also draw the targets over time into PNG")
    args = p.parse_args(argv)
    rows = history(args.runs or committed_runs())
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
