"""python -m fusedattend check: the parity grids on the backends here, as a table of errors.

Each case runs on every chosen backend and is compared with the float64 oracle of the test
suite (tests/oracle.py, run from a source checkout: it shares no code with the package). A
case passes when its worst error is within the tolerance derived in docs/testing.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _grids():
    root = Path(__file__).resolve().parent.parent
    if not (root / "tests" / "parity" / "grids.py").is_file():
        raise SystemExit(
            "python -m fusedattend check needs the test suite's oracle: run it from a source "
            "checkout of fusedattend (pip install -e '.[cpu,test]')."
        )
    sys.path.insert(0, str(root))
    from tests.parity import grids

    return grids


def main(argv=None):
    import fusedattend as fa

    p = argparse.ArgumentParser(prog="python -m fusedattend check", description=__doc__.split("\n")[0])
    p.add_argument("--backend", action="append", default=None,
                   help=f"backend to check (repeatable; default: the best here, {fa.default_backend()!r}, and 'reference')")
    p.add_argument("--grid", action="append", choices=["A", "B", "Q"], default=None,
                   help="grids to run (default: A, B and Q)")
    args = p.parse_args(argv)
    for name in args.backend or []:
        if name not in fa.available_backends():
            p.error(f"--backend {name!r} is not available here; available: {fa.available_backends()}")
    grids = _grids()
    backends = args.backend or list(dict.fromkeys([fa.default_backend(), "reference"]))
    chosen = args.grid or ["A", "B", "Q"]
    cases = [c for name in chosen for c in getattr(grids, f"GRID_{name}")]
    print(f"fusedattend check: {len(cases)} cases (grids {', '.join(chosen)}) on {', '.join(backends)}")
    width = max(len(c.id) for c in cases)
    header = f"{'case':<{width}}  " + "  ".join(f"{b + ' max|err|':>20}" for b in backends)
    print(header)
    print("-" * len(header))
    failed = {b: 0 for b in backends}
    worst = {b: 0.0 for b in backends}
    start = time.perf_counter()
    for i, case in enumerate(cases, 1):
        built = grids.make_case(case, seed=0)
        expected, stats = grids.oracle_reference(built)
        tol = grids.tolerance(built, expected, stats)
        cells = []
        for b in backends:
            ratio, err = grids.compare(grids.run(built, b), expected, tol)
            ok = ratio <= 1.0
            failed[b] += not ok
            worst[b] = max(worst[b], ratio)
            cells.append(f"{err:>12.3g} {'ok' if ok else 'FAIL':>4} {ratio:>4.2f}")
        print(f"{case.id:<{width}}  " + "  ".join(f"{c:>20}" for c in cells), flush=True)
    print("-" * len(header))
    print("columns: max |ours - float64 oracle|, verdict, error / tolerance (<= 1 passes)")
    for b in backends:
        print(f"{b}: {len(cases) - failed[b]}/{len(cases)} within tolerance, worst error/tolerance {worst[b]:.2f}")
    print(f"{time.perf_counter() - start:.1f} s")
    return 1 if any(failed.values()) else 0
