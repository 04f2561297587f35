"""docs/performance.md and the README's tables, written whole from the committed sweep results
(benchmarks/results/<chip>.json).

    python -m fusedattend.benchmarks.performance_page                 # rewrite both
    python -m fusedattend.benchmarks.performance_page --check         # exit 1 if either is out of date
    python -m fusedattend.benchmarks.performance_page --add RUN.json  # RUN.json (bench --json) becomes
                                                                      # results/<its chip>.json
    python -m fusedattend.benchmarks.performance_page --add-generate RUN.json  # generate-bench --json:
                                                                      # into results/generate/<chip>.json

A results file is one sweep of `python -m fusedattend bench --json`, compacted: the run's date,
MLX version, device and command, and one row a timing (format, B, S, implementation, best µs a
call, GB/s of K/V read). The page is never appended to: every run of this module writes all of
it again from the results, so that it cannot drift from them (tests/unit/test_performance_page.py
checks that the committed page is this module's output). The README keeps one short table a chip
between README_BEGIN and README_END, rewritten the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import generate_results, targets

RESULTS = Path(__file__).resolve().parent / "results"
PAGE = Path("docs/performance.md")
README = Path("README.md")
README_BEGIN = "<!-- performance tables: python -m fusedattend.benchmarks.performance_page -->"
README_END = "<!-- end of performance tables -->"
README_BATCHES = (1, 8)  # the README's rows: a single request and a small batch, every S
COLUMNS = ("format", "B", "S", "impl", "us", "gbps")
META = ("chip", "date", "mlx", "mlx_lm", "device", "command", "memory_read_gbps", "shape", "backends",
        "repeats", "inner", "cold_mb", "chain")
FUSED = ("reference", "cpu", "metal", "cuda")  # fusedattend.BACKENDS, without importing MLX


def compact(run: dict) -> dict:
    """A `bench --json` run as a results file: its meta (META) and its rows (COLUMNS), rounded to
    what the page prints (µs to 0.01, GB/s to 0.1)."""
    meta = {k: run["meta"][k] for k in META if k in run["meta"]}
    meta["memory_read_gbps"] = round(meta["memory_read_gbps"], 1)
    rows = [[r["format"], r["B"], r["S"], r["impl"], round(r["us"], 2), round(r["gbps"], 1)] for r in run["results"]]
    out = dict(meta, columns=list(COLUMNS), rows=rows)
    if run.get("failures"):
        out["failures"] = [{k: f[k] for k in ("format", "B", "S", "impl", "error")} for f in run["failures"]]
    return out


def expand(result: dict) -> dict:
    """A results file as `bench --json` lays a run out ({"meta", "results"}: targets reads that)."""
    meta = {k: v for k, v in result.items() if k not in ("columns", "rows", "failures")}
    rows = [dict(zip(result["columns"], row)) for row in result["rows"]]
    return {"meta": meta, "results": rows, "failures": result.get("failures", [])}


def dumps(result: dict) -> str:
    """JSON with one row a line: small diffs when a chip's results are replaced."""
    head = {k: v for k, v in result.items() if k not in ("rows", "failures")}
    text = json.dumps(head, indent=1, ensure_ascii=False)[:-2]
    rows = ",\n  ".join(json.dumps(row, ensure_ascii=False) for row in result["rows"])
    text += f',\n "rows": [\n  {rows}\n ]'
    if result.get("failures"):
        text += ',\n "failures": ' + json.dumps(result["failures"], ensure_ascii=False)
    return text + "\n}\n"


def load_results(folder: Path = RESULTS) -> list:
    """Every results file, by chip name."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def main_backend(result: dict) -> str:
    """The backend the ratios are taken against: the run's fastest kind of backend (a GPU's or
    the CPU one), the reference only when nothing else ran."""
    ran = [b for b in result.get("backends", []) if b in FUSED]
    return next((b for b in ran if b != "reference"), ran[0] if ran else "reference")


def _fmt_us(us):
    return f"{us:.1f}" if us < 10_000 else f"{us:,.0f}"


def format_table(rows: list, main: str, bandwidth: float) -> list:
    """Markdown lines of one format's rows: µs of every implementation a B and S, the main
    backend's GB/s and share of the read bandwidth, and each peer's time over the main backend's."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    impls = [main] + [i for i in impls if i != main]
    peers = [i for i in impls if i not in FUSED]
    times = {(r["B"], r["S"], r["impl"]): r for r in rows}
    shapes = sorted({(r["B"], r["S"]) for r in rows})
    head = ["B", "S", *(f"{i} µs" for i in impls), f"{main} GB/s", "% of read bw", *(f"{p} / {main}" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for B, S in shapes:
        ours = times.get((B, S, main))
        cells = [str(B), str(S)]
        cells += [_fmt_us(times[(B, S, i)]["us"]) if (B, S, i) in times else "-" for i in impls]
        cells += [f"{ours['gbps']:.0f}" if ours['gbps'] >= 10 else f"{ours['gbps']:.1f}", f"{100 * ours['gbps'] / bandwidth:.0f}%"] if ours else ["-", "-"]
        cells += [f"{times[(B, S, p)]['us'] / ours['us']:.2f}x" if ours and (B, S, p) in times else "-" for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def chip_section(result: dict) -> list:
    run = expand(result)
    main = main_backend(result)
    bandwidth = result["memory_read_gbps"]
    shape = result.get("shape", {})
    lines = [f"## {result['chip']}", "",
             f"{result['date']}, MLX {result['mlx']}"
             + (f", mlx_lm {result['mlx_lm']}" if result.get("mlx_lm") else "")
             + f", {result['device']}; memory-read bandwidth {bandwidth:.0f} GB/s; "
             f"H_q = {shape.get('H_q')}, H_kv = {shape.get('H_kv')}, D = {shape.get('D')}, L = {shape.get('L')}"
             + (f", {result['cold_mb']} MB of cache copies read in turn (cold)" if result.get("cold_mb") else
                ", one cache read by every call (warm)"), "",
             "    " + result["command"], ""]
    for fmt in dict.fromkeys(r["format"] for r in run["results"]):
        lines += [f"### {fmt}", ""]
        lines += format_table([r for r in run["results"] if r["format"] == fmt], main, bandwidth)
        lines.append("")
    for f in run["failures"]:
        lines.append(f"- {f['impl']} at {f['format']}, B = {f['B']}, S = {f['S']} raised: {f['error'][:120]}")
    if run["failures"]:
        lines.append("")
    try:
        measured = targets.targets(run, main)
    except ValueError:  # a run without the GPU targets' shapes or peers (a CPU sweep)
        measured = None
    if measured:
        met_word = {True: "**yes**", False: "no", None: "-"}
        lines += ["### Targets", "", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {name} | {text} | {met_word[met]} |" for name, text, met in measured]
        lines.append("")
    return lines


def render(results: list, generation: list = ()) -> str:
    lines = ["# Performance", "",
             "<!-- Written by `python -m fusedattend.benchmarks.performance_page` from "
             "benchmarks/results/*.json: edit those (or the generator), not this page. -->", "",
             "Best µs a call of each implementation, one sweep a chip, every time from the same run. "
             "GB/s counts the K/V bytes a call reads (the quantized bytes for q4); a peer's ratio is its "
             "time over ours (> 1: ours is faster). Peers: `mx.fast.sdpa` (MLX's "
             "scaled_dot_product_attention on the float cache), `mlx_lm.qsdpa` (mlx_lm's quantized "
             "SDPA), `dequant+sdpa` (mx.dequantize, then MLX's SDPA) and `torch.sdpa` (PyTorch's, where "
             "it imports).", "",
             "## Reproducing", "",
             "Each chip's section gives the command its sweep ran. To add or replace a chip's results:", "",
             "    python -m fusedattend bench <the options above> --json run.json",
             "    python -m fusedattend.benchmarks.performance_page --add run.json   # results/<chip>.json",
             "    python -m fusedattend.benchmarks.performance_page                  # this page", "",
             "How the timings are taken (queued calls, cold caches, the peers timed alike) is in the "
             "docstrings of `fusedattend.benchmarks.cli` and `fusedattend.benchmarks.harness`; the "
             "regression suite (tests/perf, `ci/perf.sh record|compare`) is described in "
             "[testing.md](testing.md#the-perf-regression).", ""]
    lines += ["Chips: " + ", ".join(f"[{r['chip']}](#{r['chip']})" for r in results), ""]
    for result in results:
        lines += chip_section(result)
    lines += generate_results.section(list(generation))
    return "\n".join(lines).rstrip() + "\n"


def readme_table(result: dict) -> list:
    """One chip's README table: at B in README_BATCHES and every S, the main backend's µs for
    bf16 and 4-bit K/V and the peers' time over it (MLX's SDPA for bf16; mlx_lm's quantized SDPA
    and MLX's SDPA over the bf16 cache for 4-bit)."""
    main = main_backend(result)
    us = {(r["format"], r["B"], r["S"], r["impl"]): r["us"] for r in expand(result)["results"]}
    shapes = sorted({(B, S) for _, B, S, _ in us if B in README_BATCHES})

    def ratio(peer, ours):
        return f"{us[peer] / us[ours]:.2f}x" if peer in us and ours in us else "-"

    lines = [f"**{result['chip']}** ({result['device']}, MLX {result['mlx']}, {result['date'][:10]}; "
             f"backend `{main}`)", "",
             "| B | S | bf16 µs | MLX SDPA / ours | 4-bit µs | mlx_lm 4-bit SDPA / ours | MLX SDPA bf16 / ours 4-bit |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for B, S in shapes:
        bf, q4 = ("bfloat16", B, S, main), ("q4", B, S, main)
        lines.append(f"| {B} | {S} | {_fmt_us(us[bf]) if bf in us else '-'} | "
                     f"{ratio(('bfloat16', B, S, 'mx.fast.sdpa'), bf)} | {_fmt_us(us[q4]) if q4 in us else '-'} | "
                     f"{ratio(('q4', B, S, 'mlx_lm.qsdpa'), q4)} | {ratio(('bfloat16', B, S, 'mx.fast.sdpa'), q4)} |")
    return lines + [""]


def render_readme(readme: str, results: list) -> str:
    """`readme` with the text between README_BEGIN and README_END replaced by a table a chip."""
    if README_BEGIN not in readme or README_END not in readme:
        raise ValueError(f"the README has no {README_BEGIN!r} ... {README_END!r} block")
    head, rest = readme.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    tables = [line for result in results for line in readme_table(result)]
    return head + README_BEGIN + "\n" + "\n".join(tables) + README_END + tail


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fusedattend.benchmarks.performance_page",
                                description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of results/<chip>.json")
    p.add_argument("--out", type=Path, default=PAGE, help="the page to write (default: %(default)s)")
    p.add_argument("--readme", type=Path, help=f"the README whose tables to rewrite (default: {README} with the default --out)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page or the README differs")
    p.add_argument("--add", type=Path, metavar="RUN.json", help="compact a bench --json run into the results first")
    p.add_argument("--add-generate", type=Path, metavar="RUN.json",
                   help="merge a generate-bench --json run into results/generate/<chip>.json first")
    args = p.parse_args(argv)
    generation = args.results / "generate"
    if args.add_generate:
        print(f"wrote {generate_results.add(args.add_generate, generation)}")
    if args.add:
        result = compact(json.loads(args.add.read_text()))
        path = args.results / f"{result['chip']}.json"
        path.write_text(dumps(result))
        print(f"wrote {path}")
    results = load_results(args.results)
    written = {args.out: render(results, generate_results.load(generation))}
    readme = args.readme or (README if args.out == PAGE else None)
    if readme is not None and readme.is_file():
        written[readme] = render_readme(readme.read_text(), results)
    stale = [path for path, text in written.items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run python -m fusedattend.benchmarks.performance_page", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(written[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
