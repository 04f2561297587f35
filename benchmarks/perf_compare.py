"""A perf run against its chip's newest baseline, row by row, with a threshold that fits the row.

    python -m fusedattend.benchmarks.perf_compare tests/perf/baselines/<chip> RUN.json [--fail 25] [--host-bound-fail 60]

RUN.json is pytest-benchmark's `--benchmark-json` output of `tests/perf` (ci/perf.sh compare
writes it). Each row's median is taken per call (a round's median over its `calls_per_round`
queued calls). A row whose baseline call takes less than --host-bound-us is host-bound: its time
is the host's dispatch, which read up to 43% slower in back-to-back runs of unchanged kernels
on the H200 (docs/decisions/perf-compare-thresholds.md), so it fails only past --host-bound-fail; the others past --fail.
A row past its limit fails only if it is also past it against its gauge, the peer timed beside
it in the same process (MLX's SDPA, mlx_lm's quantized SDPA, or mlx_lm's step for the model
rows: HOST_GAUGES): a slower host or a disturbed GPU stretches the peer's time too, a slower
kernel or dispatch of ours does not. A row whose two runs share no gauge is judged by its time
alone.
Prints one line a row; exits 1 when a row is slower than its threshold allows, or when the run
shares no row with the baseline. --failed FILE lists the slow rows' names there, one a line
(ci/perf.sh times those again and fails only if they are slow twice).
"""

import argparse
import json
import sys
from pathlib import Path


def saved_runs(storage: Path) -> list:
    """The saved runs under a chip's storage folder (NNNN_<chip>.json), oldest first; [] for none."""
    return sorted(storage.glob("*/*.json"), key=lambda p: p.name)


def saved_baselines(storage: Path) -> list:
    """saved_runs, of which there must be one."""
    runs = saved_runs(storage)
    if not runs:
        raise SystemExit(f"no baseline under {storage}")
    return runs


def newest_baseline(storage: Path) -> Path:
    """The highest-numbered saved run under a chip's storage folder."""
    return saved_baselines(storage)[-1]


def per_call_median(benchmark: dict) -> float:
    """A saved benchmark's median seconds per call: its rounds queue calls_per_round calls (1 in
    baselines that predate the field)."""
    return benchmark["stats"]["median"] / benchmark["extra_info"].get("calls_per_round", 1)


def per_call_medians(path: Path) -> dict:
    """test name -> median seconds per call."""
    return {b["name"]: per_call_median(b) for b in json.loads(path.read_text())["benchmarks"]}


# Peers that go through the same host as our calls, in the order a row's gauge is taken from
# them: a benchmark's extra_info["ratio_<peer>"] is the peer's time over ours in that run.
HOST_GAUGES = ("mx.fast.sdpa", "mlx_lm", "mlx_lm.qsdpa", "mlx_lm.bf16")


def gauge_ratios(path: Path) -> dict:
    """test name -> {peer: peer's time / ours} for the peers in HOST_GAUGES that the row timed."""
    return {b["name"]: {p: b["extra_info"][f"ratio_{p}"] for p in HOST_GAUGES if f"ratio_{p}" in b["extra_info"]}
            for b in json.loads(path.read_text())["benchmarks"]}


def against_gauge(baseline_gauges: dict, run_gauges: dict):
    """(peer, how many times slower the row got against that peer), or None with no shared peer."""
    for peer in HOST_GAUGES:
        if peer in baseline_gauges and peer in run_gauges:
            return peer, baseline_gauges[peer] / run_gauges[peer]
    return None


def compare(baseline: dict, run: dict, fail: float, host_bound_fail: float, host_bound_s: float,
            baseline_gauges: dict = None, run_gauges: dict = None):
    """(lines, failed names, rows compared): rows only one side holds are listed, not compared.
    baseline_gauges / run_gauges (gauge_ratios) let a row past its limit pass when it is within
    that limit against its peer."""
    lines, failed, shared = [], [], 0
    for name in sorted(baseline.keys() | run.keys()):
        if name not in run or name not in baseline:
            lines.append(f"{name}: {'not run' if name not in run else 'no baseline'}")
            continue
        shared += 1
        ratio = run[name] / baseline[name]
        host_bound = baseline[name] < host_bound_s
        limit = 1 + (host_bound_fail if host_bound else fail) / 100
        note = ", host-bound" if host_bound else ""
        slow = ratio > limit
        if slow:
            gauge = against_gauge((baseline_gauges or {}).get(name, {}), (run_gauges or {}).get(name, {}))
            if gauge is not None:
                peer, relative = gauge
                note += f"; {relative:.2f}x against {peer}"
                slow = relative > limit
        if slow:
            failed.append(name)
        lines.append(f"{name}: {baseline[name] * 1e6:.1f} -> {run[name] * 1e6:.1f} us a call, {ratio:.2f}x "
                     f"(limit {limit:.2f}x{note}) {'FAIL' if slow else 'ok'}")
    return lines, failed, shared


def percent(text: str) -> float:
    return float(text.rstrip("%"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("storage", type=Path, help="a chip's baseline folder, or one baseline's JSON")
    p.add_argument("run", type=Path, help="pytest-benchmark --benchmark-json output")
    p.add_argument("--fail", type=percent, default=25.0, help="allowed slowdown in %% (default 25)")
    p.add_argument("--host-bound-fail", type=percent, default=None,
                   help="allowed slowdown in %% for host-bound rows (default: --fail)")
    p.add_argument("--host-bound-us", type=float, default=0.0,
                   help="rows whose baseline call is shorter than this are host-bound (default 0: none)")
    p.add_argument("--failed", type=Path, help="write the slow rows' names to this file")
    args = p.parse_args(argv)
    baseline_path = args.storage if args.storage.suffix == ".json" else newest_baseline(args.storage)
    host_bound_fail = args.fail if args.host_bound_fail is None else args.host_bound_fail
    lines, failed, shared = compare(per_call_medians(baseline_path), per_call_medians(args.run), args.fail,
                                    host_bound_fail, args.host_bound_us * 1e-6,
                                    gauge_ratios(baseline_path), gauge_ratios(args.run))
    if args.failed:
        args.failed.write_text("".join(f"{name}\n" for name in failed))
    print(f"against {baseline_path}")
    print("\n".join(lines))
    if failed or shared == 0:
        print(f"{len(failed)} of {shared} rows slower than allowed" if shared else "no row in common")
        return 1
    print(f"{shared} rows within their limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
