"""python -m fusedattend bench: time decode attention against its peers, in one run.

    python -m fusedattend bench                                  # default CPU sweep
    python -m fusedattend bench --B 1,8 --S 1024,4096 --formats bfloat16,q4 \\
        --json bench.json --plot bench.png

For every shape (B, S) and format (a float dtype, or qN = N-bit K/V with --qdtype queries) it
times each fusedattend backend asked for and each peer that applies (mx.fast.sdpa,
mlx_lm.qsdpa, dequant+sdpa, torch.sdpa: fusedattend.benchmarks.harness), and prints µs per
call, GB/s of K/V read and the ratio of each backend to each peer (peer time / backend time:
> 1 means the backend is faster). The machine's memory-read bandwidth is measured in the same
run (best of several sums over a large array).

By default every call reads the same K/V, so a small cache is served from the processor's last
cache level after the first call (the H200's L2 holds 50 MB). A model's decode step reads each
layer's cache once, from memory: --cold-mb N makes consecutive calls read different copies of
the cache, at least N MB of them in all, for every implementation alike. Queued calls are
independent, and a GPU may run several side by side, which flatters launches of few
threadgroups; --chain feeds each call's output to the next as its query, so that calls run one
after the other, as a model's layers do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

import mlx.core as mx

import fusedattend as fa
from fusedattend._problem import check_bits
from fusedattend.chip import chip_id

from .harness import (FLOAT_FORMATS, FUSED_BACKENDS, cold_cases, in_turn, is_quantized, memory_read_bandwidth,
                      release_memory, time_call)


def _csv(kind):
    def values(text):
        parsed = [kind(x) for x in text.split(",") if x]
        if not parsed:
            raise argparse.ArgumentTypeError(f"needs at least one value, got {text!r}")
        return parsed

    return values


def _at_least(kind, least, what):
    """An argparse type: the text read as `kind` and at least `least` (NaN is not), or a usage
    error saying it must be `what`."""
    def value(text):
        try:
            number = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not number >= least:  # NaN too
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return number

    return value


_positive = _at_least(int, 1, "a positive int")
_seconds = _at_least(float, 0, "a number of seconds >= 0")


def parse_args(argv):
    on_gpu = mx.default_device() == mx.gpu
    p = argparse.ArgumentParser(prog="python -m fusedattend bench", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    # String defaults go through each option's type, as typed values would: --help shows "1,8".
    p.add_argument("--B", type=_csv(_positive), default="1,8", help="batch sizes (comma list)")
    p.add_argument("--S", type=_csv(_positive), default="1024,4096,16384", help="cache lengths (comma list)")
    p.add_argument("--formats", type=_csv(str), default="float32,bfloat16,q4",
                   help="float32, bfloat16, float16 and/or qN (N-bit K/V: q2, q4, q8)")
    p.add_argument("--qdtype", default="bfloat16", choices=list(FLOAT_FORMATS),
                   help="query (and scales) dtype of the quantized formats")
    p.add_argument("--group-size", type=_positive, default=64, help="quantization group size of the qN formats")
    p.add_argument("--backends", type=_csv(str), default=None,
                   help="fusedattend backends, comma list (None: all available here, "
                        f"{','.join(fa.available_backends())})")
    p.add_argument("--no-peers", action="store_true", help="time the fusedattend backends only")
    p.add_argument("--H-q", type=_positive, default=32, help="query heads")
    p.add_argument("--H-kv", type=_positive, default=8, help="key/value heads (divides --H-q)")
    p.add_argument("--D", type=_positive, default=128, help="head dimension")
    p.add_argument("--L", type=_positive, default=1, help="queries per request (decode: 1)")
    p.add_argument("--repeats", type=_positive, default=7, help="samples per implementation (best is reported)")
    p.add_argument("--inner", type=_positive, default=8 if on_gpu else 1,
                   help="calls queued per mx.eval (amortises GPU launch latency; 8 on a GPU, 1 on a CPU)")
    p.add_argument("--budget", type=_seconds, default=3.0, help="stop repeating one timing after this many seconds")
    p.add_argument("--cold-mb", type=_at_least(int, 0, "an int >= 0"), default=0, metavar="N",
                   help="consecutive calls read different copies of the cache, N MB in all (0: one cache)")
    p.add_argument("--chain", action="store_true",
                   help="each call's query is the previous call's output: calls run one after the other, "
                        "as a model's layers do (off: independent calls, which a GPU may overlap)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--plot", default=None, help="write a GB/s-vs-S plot here (needs matplotlib)")
    args = p.parse_args(argv)
    args.backends = args.backends or fa.available_backends()
    if args.H_q % args.H_kv:
        p.error(f"--H-q must be a multiple of --H-kv, got {args.H_q} and {args.H_kv}")
    for fmt in args.formats:
        if fmt not in FLOAT_FORMATS and not (is_quantized(fmt) and fmt[1:].isdigit()):
            p.error(f"unknown format {fmt!r}")
        if is_quantized(fmt):
            try:
                check_bits(int(fmt[1:]), args.group_size)
            except ValueError as err:
                p.error(f"format {fmt!r}: {err}")
    unknown = [name for name in args.backends if name not in fa.available_backends()]
    if unknown:
        p.error(f"--backends: {unknown} not available here; available: {fa.available_backends()}")
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        # before the sweep, not after it: a sweep can take many minutes
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            p.error(f"{flag}: the folder {folder} does not exist")
    return args


def run_sweep(args, log=print):
    bandwidth = memory_read_bandwidth()
    log(f"memory-read bandwidth (best numpy sum): {bandwidth:.1f} GB/s")
    rows = []
    failures = []  # peers that raised (mlx_lm's quantized path on CUDA, for one)
    for fmt in args.formats:
        for B in args.B:
            for S in args.S:
                cases = cold_cases(B, S, fmt, args.cold_mb << 20, H_q=args.H_q, H_kv=args.H_kv, D=args.D,
                                   L=args.L, qdtype=FLOAT_FORMATS[args.qdtype], group_size=args.group_size)
                case = cases[0]
                impls = in_turn(cases, args.backends, args.chain)
                if args.no_peers:
                    impls = {n: f for n, f in impls.items() if n in FUSED_BACKENDS}
                for name, fn in impls.items():
                    log(f"  {fmt:>9} B={B:<3} S={S:<6} {name:<14}", end="", flush=True)
                    try:
                        samples = time_call(fn, args.repeats, args.inner, budget_s=args.budget)
                    except (RuntimeError, ValueError) as err:  # a peer that cannot run this shape
                        failures.append({"format": fmt, "B": B, "S": S, "impl": name, "error": str(err)[:300]})
                        log(f" failed: {str(err)[:100]}")
                        continue
                    best = min(samples)
                    row = {"format": fmt, "B": B, "S": S, "impl": name, "us": best * 1e6,
                           "median_us": statistics.median(samples) * 1e6, "samples": len(samples),
                           "inner": samples.inner,
                           "kv_bytes": case["kv_bytes"], "gbps": case["kv_bytes"] / best / 1e9}
                    rows.append(row)
                    fewer = "" if samples.inner == args.inner else f"  ({samples.inner} queued: more would not fit)"
                    log(f" {row['us']:>11.1f} µs {row['gbps']:>7.2f} GB/s{fewer}")
                del case, cases, impls
                release_memory()
    return bandwidth, rows, failures


def ratios(rows, backends):
    """{(format, B, S, backend): {peer: peer_us / backend_us}} for every backend and peer."""
    by_shape = {}
    for r in rows:
        by_shape.setdefault((r["format"], r["B"], r["S"]), {})[r["impl"]] = r["us"]
    out = {}
    for shape, times in by_shape.items():
        for b in backends:
            if b in times:
                out[shape + (b,)] = {p: t / times[b] for p, t in times.items() if p != b}
    return out


def table(rows, backends, bandwidth) -> str:
    rat = ratios(rows, backends)
    lines = [f"memory-read bandwidth: {bandwidth:.1f} GB/s",
             f"{'format':>9} {'B':>3} {'S':>6} {'impl':<14} {'µs/call':>11} {'GB/s':>7} {'%bw':>5}  ratios (peer time / this)"]
    for r in rows:
        key = (r["format"], r["B"], r["S"], r["impl"])
        extra = ""
        if key in rat:
            extra = "  ".join(f"{p} {x:.2f}x" for p, x in rat[key].items())
        lines.append(f"{r['format']:>9} {r['B']:>3} {r['S']:>6} {r['impl']:<14} {r['us']:>11.1f} "
                     f"{r['gbps']:>7.2f} {100 * r['gbps'] / bandwidth:>4.0f}%  {extra}")
    return "\n".join(lines)


def plot(rows, bandwidth, path, title):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot written", file=sys.stderr)
        return False
    formats = list(dict.fromkeys(r["format"] for r in rows))  # one row of panels per format
    batches = sorted({r["B"] for r in rows})  # one column per batch size
    fig, axes = plt.subplots(len(formats), len(batches), figsize=(4.5 * len(batches), 3.6 * len(formats)),
                             squeeze=False)
    for ax, (fmt, B) in zip(axes.flat, [(f, b) for f in formats for b in batches]):
        sel = [r for r in rows if r["format"] == fmt and r["B"] == B]
        for impl in dict.fromkeys(r["impl"] for r in sel):
            pts = sorted((r["S"], r["gbps"]) for r in sel if r["impl"] == impl)
            ax.plot(*zip(*pts), marker="o", label=impl)
        ax.axhline(bandwidth, color="k", linestyle="--", label=f"memory read {bandwidth:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S (keys)")
        ax.set_ylabel("GB/s of K/V read")
        ax.set_title(f"{fmt}, B={B}")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        import mlx_lm

        mlx_lm_version = mlx_lm.__version__
    except ImportError:
        mlx_lm_version = None
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "chip": chip_id(),
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm_version,
        "device": str(mx.default_device()),
        "command": "python -m fusedattend bench " + " ".join(argv),
        "shape": {"H_q": args.H_q, "H_kv": args.H_kv, "D": args.D, "L": args.L,
                  "group_size": args.group_size, "qdtype": args.qdtype},
        "repeats": args.repeats, "inner": args.inner, "backends": args.backends,
        "cold_mb": args.cold_mb, "chain": args.chain,
    }
    print(f"fusedattend bench on {meta['chip']} (mlx {meta['mlx']}, {meta['device']}), "
          f"backends {args.backends}")
    bandwidth, rows, failures = run_sweep(args)
    meta["memory_read_gbps"] = bandwidth
    print()
    print(table(rows, args.backends, bandwidth))
    if args.json:
        rat = {"/".join(map(str, k)): v for k, v in ratios(rows, args.backends).items()}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows, "failures": failures, "ratios": rat}, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot and plot(rows, bandwidth, args.plot,
                          f"{meta['chip']}  mlx {meta['mlx']}  {meta['date']}  "
                          f"H_q={args.H_q} H_kv={args.H_kv} D={args.D} L={args.L}"):
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
