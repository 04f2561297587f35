"""A saved perf baseline (pytest-benchmark JSON from ci/perf.sh record) as a markdown table.

    python -m fusedattend.benchmarks.baseline_table tests/perf/baselines/nvidia-h200/*/0040_nvidia-h200.json

One table per backend and format (and others for the decode-loop rows, whose cache grows a
key a step from S: `grows_by` in their extra_info; padded loops and loops with every step
evaluated apart; an mlx_lm model's steps, one table per kind of cache: `kind`), one row per B
and S: the backend's median µs per call (a round's median over its calls_per_round queued
calls, 1 in baselines that predate it), its GB/s of K/V, and the speed
ratio against each peer timed in the same run (> 1: ours is faster), then the geometric mean
of each ratio per format.
"""

import argparse
import json
import math
import sys
from pathlib import Path

from .perf_compare import per_call_median


def table_of(e):
    """(backend, format, what kind of call: "" one call, a decode loop's, padded or not, or an
    mlx_lm model's step over a kind of cache): the table a row goes to."""
    if "kind" in e:
        return e["backend"], e["format"], f"mlx_lm model steps over a {e['kind']}"
    loop = "padded decode loops" if "pads" in e else "decode loops" if "grows_by" in e else ""
    if e.get("each_step"):
        loop += ", every step evaluated"
    return e["backend"], e["format"], loop


def main(path):
    with open(path) as f:
        runs = [dict(b["extra_info"], median=per_call_median(b)) for b in json.load(f)["benchmarks"]]
    for backend, fmt, loop in sorted({table_of(e) for e in runs}):
        rows = sorted((e for e in runs if table_of(e) == (backend, fmt, loop)), key=lambda e: (e["B"], e["S"]))
        peers = sorted({k[len("ratio_"):] for e in rows for k in e if k.startswith("ratio_")})
        print(f"\n{fmt}, backend {backend}{f', {loop} (S: the first step)' if loop else ''}\n")
        print("| B | S | µs | GB/s | " + " | ".join(f"vs {p}" for p in peers) + " |")
        print("|---" * (4 + len(peers)) + "|")
        for e in rows:
            ratios = " | ".join(f"{e[f'ratio_{p}']:.2f}x" if f"ratio_{p}" in e else "-" for p in peers)
            gbps = f"{e['gbps']:.0f}" if "gbps" in e else "-"
            print(f"| {e['B']} | {e['S']} | {e['median'] * 1e6:.1f} | {gbps} | {ratios} |")
        means = []
        for p in peers:
            r = [e[f"ratio_{p}"] for e in rows if f"ratio_{p}" in e]
            means.append(f"{math.exp(sum(map(math.log, r)) / len(r)):.2f}x")
        print("| geometric mean | | | | " + " | ".join(means) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m fusedattend.benchmarks.baseline_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("baseline", help="a saved run: tests/perf/baselines/<chip>/*/NNNN_<chip>.json")
    path = parser.parse_args().baseline
    if not Path(path).is_file():
        parser.error(f"baseline: no such file {path!r}")
    main(path)
