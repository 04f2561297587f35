"""Perf rows across runs: each run's median µs a call for the rows whose names hold a pattern.

    python ci/row_history.py "S64-q4]" tests/perf/baselines/nvidia-h200 [more folders or RUN.json ...]

A folder stands for every baseline saved under it (NNNN_<chip>.json, in order); a file is one
run (pytest-benchmark's --benchmark-json). One line a run, one column a row; "-" where a run
lacks the row. A host-bound row's single readings say little (docs/perf.md): this shows the
spread of all of them at once, to tell a slower run from one more draw of the same spread.
"""

import argparse
import sys
from pathlib import Path

from perf_compare import per_call_medians, saved_baselines


def runs_of(paths) -> list:
    """(label, path) for each run: a folder's baselines by number, then files as given."""
    runs = []
    for path in map(Path, paths):
        if path.is_dir():
            runs += [(f"{p.parent.parent.name} {p.stem.split('_')[0]}", p) for p in saved_baselines(path)]
        elif path.is_file():
            runs.append((str(path), path))
        else:
            raise SystemExit(f"{path}: no such file or folder")
    return runs


def history(pattern: str, runs) -> tuple:
    """(row names, [(label, [µs or None per row])]) over the runs that hold any matching row."""
    medians = [(label, per_call_medians(path)) for label, path in runs]
    names = sorted({name for _, m in medians for name in m if pattern in name})
    table = [(label, [m[n] * 1e6 if n in m else None for n in names])
             for label, m in medians if any(n in m for n in names)]
    return names, table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pattern", help="a part of the rows' names, e.g. 'S64-q4]'")
    parser.add_argument("runs", nargs="+", help="a chip's baseline folder, or a run's JSON")
    args = parser.parse_args(argv)
    names, table = history(args.pattern, runs_of(args.runs))
    if not names:
        raise SystemExit(f"no row's name holds {args.pattern!r}")
    print("| run | " + " | ".join(f"`{n}`" for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for label, values in table:
        print(f"| {label} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in values) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
