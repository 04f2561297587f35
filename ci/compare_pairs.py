"""How often ci/perf_compare.py's rule fails runs against each other, with and without the peer gauge.

    python ci/compare_pairs.py RUN.json RUN.json [...] [--fail 25] [--host-bound-fail 60] [--host-bound-us 75]

Each ordered pair (baseline, run) of the given pytest-benchmark JSONs (baselines or runs of one
chip) is compared as `ci/perf_compare.py` compares them, once by time alone and once with each
row's gauge (the peer timed beside it). Prints the rows compared and the rows failed both ways,
then the rows that fail with the gauge and how often. On runs of unchanged code every failure is
a false alarm; a rule that fails fewer of them while still failing a real slowdown
(tests/test_perf_compare.py) is the better one.
"""

import argparse
import itertools
from collections import Counter
from pathlib import Path

from perf_compare import compare, gauge_ratios, per_call_medians, percent


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument("--fail", type=percent, default=25.0)
    p.add_argument("--host-bound-fail", type=percent, default=60.0)
    p.add_argument("--host-bound-us", type=float, default=75.0)
    args = p.parse_args(argv)
    limits = (args.fail, args.host_bound_fail, args.host_bound_us * 1e-6)
    runs = [(per_call_medians(path), gauge_ratios(path)) for path in args.runs]
    compared = by_time = with_gauge = 0
    failing = Counter()
    for (base, base_gauges), (run, run_gauges) in itertools.permutations(runs, 2):
        _, failed_by_time, shared = compare(base, run, *limits)
        _, failed, _ = compare(base, run, *limits, base_gauges, run_gauges)
        compared, by_time, with_gauge = compared + shared, by_time + len(failed_by_time), with_gauge + len(failed)
        failing.update(failed)
    print(f"{len(runs)} runs, {len(runs) * (len(runs) - 1)} ordered pairs, {compared} rows compared")
    print(f"failed by time alone: {by_time}; with the peer gauge: {with_gauge}")
    for name, count in failing.most_common():
        print(f"  {count:3d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
