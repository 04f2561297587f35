"""The project's speed targets on a GPU, read from one sweep's results (`python -m fusedattend
bench --json`, or a compact benchmarks/results/<chip>.json).

    python -m fusedattend.benchmarks.targets RUN.json

Prints one row a B and S (our bf16 against mx.fast.sdpa and torch's SDPA; our 4-bit against
mlx_lm's quantized path and against bf16 mx.fast.sdpa), then each target with what the run
measured and whether it is met. Ratios are a peer's time over ours (> 1: ours is faster), every
time from the same run. docs/performance.md holds these tables for the committed results.
"""

import json
import math
import sys

BIG = (32, 32768)  # B, S of the bandwidth targets
LONG_S = 8192  # "at S >= 8192" of the 4-bit against bf16 MLX target


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def shape_rows(run, backend="cuda"):
    """One dict a B and S: µs of ours (bf16, q4) and of the peers (torch None when not timed)."""
    t = {(r["format"], r["impl"], r["B"], r["S"]): r["us"] for r in run["results"]}
    shapes = sorted({(B, S) for (fmt, impl, B, S) in t if fmt == "bfloat16" and impl == backend})
    needed = [(fmt, impl, B, S) for B, S in shapes
              for fmt, impl in (("bfloat16", "mx.fast.sdpa"), ("q4", backend), ("q4", "mlx_lm.qsdpa"))]
    missing = [key for key in needed if key not in t]
    if not shapes or missing:
        raise ValueError(f"run: needs bf16 and q4 rows of {backend} and its peers at every shape; "
                         f"missing {missing[:4] or 'every ' + backend + ' row'}")
    return [dict(B=B, S=S, bf16=t[("bfloat16", backend, B, S)], mlx=t[("bfloat16", "mx.fast.sdpa", B, S)],
                 torch=t.get(("bfloat16", "torch.sdpa", B, S)), q4=t[("q4", backend, B, S)],
                 mlx_lm=t[("q4", "mlx_lm.qsdpa", B, S)]) for B, S in shapes]


def ratio_columns(rows):
    """The ratios over every shape (vs_torch over the shapes that timed torch; q4_vs_mlx at S >=
    LONG_S only)."""
    return dict(vs_mlx=[r["mlx"] / r["bf16"] for r in rows], vs_torch=[r["torch"] / r["bf16"] for r in rows if r["torch"]],
                q4_vs_lm=[r["mlx_lm"] / r["q4"] for r in rows],
                q4_vs_mlx=[r["mlx"] / r["q4"] for r in rows if r["S"] >= LONG_S])


def span(xs):
    return f"{min(xs):.2f}–{max(xs):.2f}x"


def big_shape_gbps(run, backend="cuda"):
    """(bf16, q4) GB/s of ours at the bandwidth targets' shape BIG."""
    gbps = {(r["format"], r["B"], r["S"]): r["gbps"] for r in run["results"] if r["impl"] == backend}
    if ("bfloat16", *BIG) not in gbps or ("q4", *BIG) not in gbps:
        raise ValueError(f"run: the bandwidth targets need B = {BIG[0]}, S = {BIG[1]}")
    return gbps[("bfloat16", *BIG)], gbps[("q4", *BIG)]


def near_torch(vs_torch):
    """Shapes where ours is at most 10% slower than torch's SDPA."""
    return sum(1 for x in vs_torch if x >= 1 / 1.1)


def targets(run, backend="cuda"):
    """[(target, measured, met)]: met is None where the run lacks the peer it needs."""
    rows = shape_rows(run, backend)
    bandwidth = run["meta"]["memory_read_gbps"]
    vs_mlx, vs_torch, q4_vs_lm, q4_vs_mlx = ratio_columns(rows).values()
    bf16_big, q4_big = big_shape_gbps(run, backend)
    near = near_torch(vs_torch)
    return [
        ("bf16 ≥ 1.3x mx.fast.sdpa (geometric mean), never slower",
         f"{geomean(vs_mlx):.2f}x geometric mean, {span(vs_mlx)}", geomean(vs_mlx) >= 1.3 and min(vs_mlx) >= 1),
        ("bf16 within 10% of torch SDPA at every shape",
         f"{span(vs_torch)}, within 10% at {near} of {len(vs_torch)} shapes" if vs_torch else "torch not timed",
         near == len(rows) if vs_torch else None),
        (f"bf16 ≥ 85% of read bandwidth at B = {BIG[0]}, S = {BIG[1]}",
         f"{bf16_big:.0f} of {bandwidth:.0f} GB/s, {100 * bf16_big / bandwidth:.0f}%", bf16_big >= 0.85 * bandwidth),
        ("q4 ≥ 10x mlx_lm", f"{span(q4_vs_lm)}, {geomean(q4_vs_lm):.2f}x geometric mean", min(q4_vs_lm) >= 10),
        (f"q4 ≥ 3x bf16 mx.fast.sdpa at S ≥ {LONG_S}", span(q4_vs_mlx), min(q4_vs_mlx) >= 3),
        ("q4 ≥ 80% of the quantized-bytes roofline",
         f"{q4_big:.0f} GB/s of quantized bytes at B = {BIG[0]}, S = {BIG[1]}, {100 * q4_big / bandwidth:.0f}%",
         q4_big >= 0.8 * bandwidth),
    ]


def report(run, backend="cuda") -> str:
    lines = ["| B | S | bf16 µs | mx.fast.sdpa µs | torch µs | vs MLX | vs torch | q4 µs | mlx_lm µs "
             "| q4 vs mlx_lm | q4 vs bf16 MLX |", "|---" * 11 + "|"]
    rows = shape_rows(run, backend)
    for r in rows:
        torch_us, vs_torch = (f"{r['torch']:.1f}", f"{r['torch'] / r['bf16']:.2f}x") if r["torch"] else ("-", "-")
        lines.append(f"| {r['B']} | {r['S']} | {r['bf16']:.1f} | {r['mlx']:.1f} | {torch_us} "
                     f"| {r['mlx'] / r['bf16']:.2f}x | {vs_torch} | {r['q4']:.1f} | {r['mlx_lm']:.1f} "
                     f"| {r['mlx_lm'] / r['q4']:.2f}x | {r['mlx'] / r['q4']:.2f}x |")
    ratios = ratio_columns(rows)
    vs_torch = f"{geomean(ratios['vs_torch']):.2f}x" if ratios["vs_torch"] else "-"
    lines.append(f"| geometric mean | | | | | {geomean(ratios['vs_mlx']):.2f}x | {vs_torch} | | | "
                 f"{geomean(ratios['q4_vs_lm']):.2f}x | |")
    meta = run["meta"]
    lines += ["", f"{meta.get('date')}, {meta.get('chip')}, mlx {meta.get('mlx')}, read bandwidth "
              f"{meta['memory_read_gbps']:.0f} GB/s, cold_mb {meta.get('cold_mb')}, chain {meta.get('chain')}", "",
              "| target | measured | met |", "|---|---|---|"]
    met_word = {True: "**yes**", False: "no", None: "-"}
    lines += [f"| {name} | {measured} | {met_word[met]} |" for name, measured, met in targets(run, backend)]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        run = json.load(f)
    if "rows" in run:  # a compact results/<chip>.json
        from .performance_page import expand

        run = expand(run)
    print(report(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
