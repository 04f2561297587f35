"""python -m fusedattend check: the parity grids on the backends here, against the float64 oracle.

Each case runs on every chosen backend and is compared with fusedattend.conformance.oracle (a
float64 numpy oracle that shares no code with the implementation). A case passes when its worst
error is within the tolerance derived in docs/testing.md (fusedattend.conformance.grids).
Prints a progress line while it runs and a summary per backend; the row of each case with
--verbose, and of each failing case always.
"""

from __future__ import annotations

import argparse
import sys
import time

GRIDS = ("A", "B", "Q")
# Where the output is not a terminal (a CI log), one progress line every this many cases.
PROGRESS_EVERY = 50


class Progress:
    """`[ 37/272] grid B ...`: rewritten in place on a terminal, a line every PROGRESS_EVERY cases
    elsewhere (a log keeps every line)."""

    def __init__(self, total, stream):
        self.total, self.stream = total, stream
        self.tty = stream.isatty()
        self.width = len(str(total))
        self.shown = False

    def update(self, done, case):
        if not self.tty and done % PROGRESS_EVERY and done != self.total:
            return
        line = f"[{done:>{self.width}}/{self.total}] grid {case.id.split('-')[0]}: {case.id}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.shown = True

    def clear(self):
        """Ends the line being rewritten, so that a row or the summary starts on a clean one."""
        if self.tty and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def parse_args(argv):
    import fusedattend as fa

    p = argparse.ArgumentParser(prog="python -m fusedattend check", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backend", action="append", default=None,
                   help="backend to check (repeatable; None: the best here and 'reference', "
                        f"{', '.join(dict.fromkeys([fa.default_backend(), 'reference']))})")
    p.add_argument("--grid", action="append", choices=GRIDS, default=None,
                   help=f"grid to run (repeatable; None: {', '.join(GRIDS)})")
    p.add_argument("--verbose", "-v", action="store_true", help="print every case's row, not only failing ones")
    args = p.parse_args(argv)
    for name in args.backend or []:
        if name not in fa.available_backends():
            p.error(f"--backend {name!r} is not available here; available: {fa.available_backends()}")
    args.backend = args.backend or list(dict.fromkeys([fa.default_backend(), "reference"]))
    args.grid = list(dict.fromkeys(args.grid or GRIDS))
    return args


def check_case(grids, case, backends):
    """{backend: (max |error|, error / tolerance, seconds)} of one grid case."""
    built = grids.make_case(case, seed=0)
    expected, stats = grids.oracle_reference(built)
    tol = grids.tolerance(built, expected, stats)
    result = {}
    for b in backends:
        start = time.perf_counter()
        out = grids.run(built, b)
        ratio, err = grids.compare(out, expected, tol)  # compare evaluates `out`: its time counts
        result[b] = (err, ratio, time.perf_counter() - start)
    return result


def main(argv=None, out=None):
    from fusedattend.conformance import grids

    out = out or sys.stdout
    args = parse_args(argv)
    backends = args.backend
    cases = [c for name in args.grid for c in getattr(grids, f"GRID_{name}")]
    print(f"fusedattend check: {len(cases)} cases (grids {', '.join(args.grid)}) on {', '.join(backends)}", file=out)
    print("Each row: a case, then per backend: max |ours - float64 oracle|, ok or FAIL, and error / tolerance "
          "(<= 1 passes).", file=out)
    width = max(len(c.id) for c in cases)
    header = f"{'case':<{width}}  " + "  ".join(f"{b + ' max|err| ok err/tol':>32}" for b in backends)
    header_shown = False
    progress = Progress(len(cases), out)
    totals = {b: {"failed": 0, "worst": 0.0, "worst_case": None, "seconds": 0.0} for b in backends}
    start = time.perf_counter()
    for i, case in enumerate(cases, 1):
        progress.update(i, case)
        result = check_case(grids, case, backends)
        failing = False
        for b, (_, ratio, seconds) in result.items():
            t = totals[b]
            t["seconds"] += seconds
            if not ratio <= 1.0:  # NaN fails too
                t["failed"] += 1
                failing = True
            if not ratio <= t["worst"]:
                t["worst"], t["worst_case"] = ratio, case.id
        if args.verbose or failing:
            progress.clear()
            if not header_shown:
                print(header, file=out)
                header_shown = True
            cells = [f"{e:>12.3g} {'ok' if r <= 1.0 else 'FAIL':>4} {r:>7.2f}" for e, r, _ in result.values()]
            print(f"{case.id:<{width}}  " + "  ".join(f"{c:>32}" for c in cells), file=out, flush=True)
    progress.clear()
    print(f"summary ({time.perf_counter() - start:.1f} s in all, the oracle's and the grids' set-up included):",
          file=out)
    for b, t in totals.items():
        verdict = "ok" if not t["failed"] else f"{t['failed']} FAILED"
        print(f"  {b}: {len(cases) - t['failed']}/{len(cases)} cases within tolerance ({verdict}), worst "
              f"error/tolerance {t['worst']:.2f} ({t['worst_case']}), {t['seconds']:.1f} s", file=out)
    return 1 if any(t["failed"] for t in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
