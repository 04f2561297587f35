"""Table of an A/B of `python -m fusedattend bench` runs: DIR holds NAME_{variant}_{round}.json
(the variants taking turns, e.g. an environment variable set to 0 and 1). Per shape, format and
implementation: each variant's best and median over the rounds, and the change of the median.

    python ci/gpu/bench_ab.py DIR [A B]     # variants A (before) and B (after); default 0 and 1
"""
import glob
import json
import os
import statistics
import sys


def main(folder, before="0", after="1"):
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*_*_*.json"))):
        variant = os.path.basename(path)[:-5].split("_")[-2]
        for row in json.load(open(path))["results"]:
            key = (row["format"], row["B"], row["S"], row["impl"])
            runs.setdefault(key, {}).setdefault(variant, []).append(row["us"])
    print(f"| format | B | S | impl | {before}: best / median µs | {after}: best / median µs | median change |")
    print("|---|---|---|---|---|---|---|")
    for (fmt, B, S, impl), by in sorted(runs.items()):
        a, b = by.get(before), by.get(after)
        if a and b:
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {fmt} | {B} | {S} | {impl} | {min(a):.1f} / {ma:.1f} | {min(b):.1f} / {mb:.1f} | "
                  f"{100 * (mb - ma) / ma:+.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
