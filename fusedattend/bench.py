"""python -m fusedattend bench: time decode attention against its peers, in one run.

    python -m fusedattend bench                                  # default CPU sweep
    python -m fusedattend bench --B 1,8 --S 1024,4096 --formats bfloat16,q4 \
        --json bench.json --plot bench.png

For every shape (B, S) and format (a float dtype, or qN = N-bit K/V with --qdtype queries) it
times each fusedattend backend asked for and each peer that applies:

    mx.fast.sdpa       mx.fast.scaled_dot_product_attention on the float K/V
    mlx_lm.qsdpa       mlx_lm.models.base.quantized_scaled_dot_product_attention (quantized)
    dequant+sdpa       mx.dequantize the cache, then mx.fast.scaled_dot_product_attention
    torch.sdpa         torch.nn.functional.scaled_dot_product_attention, when torch imports

and prints µs per call, GB/s of K/V read and the ratio of each backend to each peer
(peer time / backend time: > 1 means the backend is faster). The machine's memory-read
bandwidth is measured in the same run (best of several numpy sums over a large array).

By default every call reads the same K/V, so a small cache is served from the processor's last
cache level after the first call (the H200's L2 holds 50 MB). A model's decode step reads each
layer's cache once, from memory: --cold-mb N makes consecutive calls read different copies of
the cache, at least N MB of them in all, for every implementation alike. Queued calls are
independent, and a GPU may run several side by side, which flatters launches of few
threadgroups; --chain feeds each call's output to the next as its query, so that calls run one
after the other, as a model's layers do.

The timing helpers here (`time_call`, `memory_read_bandwidth`, `make_case`, `implementations`)
are the ones tests/perf uses.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import statistics
import sys
import time

import mlx.core as mx
import numpy as np

import fusedattend as fa

from ._problem import check_bits
from .chip import chip_id

FLOAT_FORMATS = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
FUSED_BACKENDS = fa.BACKENDS


# --- timing helpers (shared with tests/perf) ---------------------------------------------------


class Samples(list):
    """Seconds per call, one a sample; `inner` is how many calls each sample queued."""

    inner = 1


# A sample's queued calls all stay alive until its one mx.eval ends, transients included: at most
# this share of the GPU's memory goes to them (dequant+sdpa at B = 32, S = 32768 holds 4.3 GB a
# call, and 20 of them ran out of memory on an 80 GB H100, 2026-12-05).
QUEUED_MEMORY_SHARE = 0.75


def _gpu_memory_bytes():
    """The GPU's memory as MLX reports it (its key differs by backend), or None (a CPU)."""
    if mx.default_device() != mx.gpu:
        return None
    info = mx.device_info()
    for key in ("max_recommended_working_set_size", "memory_size", "total_memory"):
        if info.get(key):
            return int(info[key])
    return None


def calls_that_fit(per_call_bytes, active_bytes, memory_bytes, share=QUEUED_MEMORY_SHARE):
    """How many calls of `per_call_bytes` each fit beside `active_bytes` in `share` of
    `memory_bytes` (at least 1; None when the memory is unknown: no limit)."""
    if memory_bytes is None or per_call_bytes <= 0:
        return None
    return max(1, int((share * memory_bytes - active_bytes) // per_call_bytes))


def _peak_bytes(fn):
    """Evaluates one call of `fn`; the memory it held at its peak beyond what was already allocated."""
    active = mx.get_active_memory()
    mx.reset_peak_memory()
    mx.eval(fn())
    return mx.get_peak_memory() - active


def release_memory():
    """Hands back the memory MLX, and torch where it was imported, keep cached for reuse.

    Each allocator keeps the buffers it freed and neither counts the other's, so on an 80 GB H100
    a shape allocated after the largest ones could run out of memory (call 202, 2026-12-05).
    Call it between shapes, not between samples of one shape.
    """
    gc.collect()
    mx.clear_cache()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def time_call(fn, repeats=5, inner=1, warmup=1, budget_s=None):
    """Seconds per call of `fn`, one sample per repeat, each sample `inner` calls then one mx.eval.

    MLX is lazy: each sample evaluates what its calls returned, so the sample times the work.
    On a GPU, inner > 1 queues several calls per evaluation so launch latency is amortised;
    fewer are queued where `inner` of them would not fit in memory together (the warm-up
    measures a call's peak, so warmup=0 queues `inner` regardless; the samples' `inner` says
    how many were).
    With budget_s, repeats stop early once that much time was spent (at least one sample).
    """
    if inner > 1 and warmup:  # only queued calls need the warm-up's peak
        per_call = max(_peak_bytes(fn) for _ in range(warmup))
        inner = min(inner, calls_that_fit(per_call, mx.get_active_memory(), _gpu_memory_bytes()) or inner)
    else:
        for _ in range(warmup):
            mx.eval(fn())
    samples = Samples()
    samples.inner = inner
    spent = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        mx.eval([fn() for _ in range(inner)])
        dt = time.perf_counter() - t0
        samples.append(dt / inner)
        spent += dt
        if budget_s is not None and spent > budget_s:
            break
    return samples


def memory_read_bandwidth(nbytes=512 << 20, repeats=5) -> float:
    """Best-of-`repeats` GB/s of one sum over `nbytes` of float32 (larger than any cache).

    On the GPU an MLX sum over 4 GiB (well past the L2), on the CPU a numpy sum.
    """
    if mx.default_device() == mx.gpu:
        data = mx.ones((4 << 30) // 4, dtype=mx.float32)
        mx.eval(data)
        best = min(time_call(lambda: mx.sum(data), repeats=repeats, inner=4))
        return data.nbytes / best / 1e9
    data = np.ones(nbytes // 4, np.float32)
    best = min(_timed(data.sum) for _ in range(repeats))
    return data.nbytes / best / 1e9


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def is_quantized(fmt: str) -> bool:
    return fmt.startswith("q")


def first_keys(cache, S):
    """The first S keys of a K/V cache (an array, or a quantized triple of arrays), as mlx_lm's
    caches hand them to each decode step: slices along axis 2, read in place."""
    if isinstance(cache, tuple):
        return tuple(x[:, :, :S] for x in cache)
    return cache[:, :, :S]


def growing_loop(step, x0, S, steps, room, each_step=False):
    """A decode loop on a growing cache, as one callable per implementation: each call runs `steps`
    chained steps (each step's query the step before's output, from x0) and returns the last
    output; step i of the n-th call is on the cache's first S + (n * steps + i) % room keys.
    each_step: evaluate every step before the next (as a server that samples each token), instead
    of leaving the steps queued for the caller to evaluate.

    Every implementation timed gets its own, so all of them see the same sequence of S, each S new
    to it until `room` wraps (mlx_lm's caches hand each step a slice one key longer). One counter
    shared by the implementations timed in turn gave each a later stretch of the sequence: the
    peers timed after ours read more keys a step (up to 2.5x at S = 2048 in ci/gpu/decode_loop.py
    before 2026-12-02)."""
    keys = itertools.count()

    def run():
        x = x0
        for _ in range(steps):
            x = step(x, S + next(keys) % room)
            if each_step:
                mx.eval(x)
        return x

    return run


# Left-padded batches (tests/perf's padded decode loops, ci/gpu/padded_loop_cost.py): request b's
# keys start PAD_STEP * b mod PAD_MAX keys in.
PAD_STEP, PAD_MAX = 37, 512


def left_pads(B):
    """Each request's padding, in keys."""
    return [PAD_STEP * b % PAD_MAX for b in range(B)]


def padded_key_ranges(pads):
    """The key_ranges of left-padded requests, for every S: one fusedattend.KeyRanges a batch, as
    a server makes it when requests join or leave."""
    return fa.KeyRanges.from_padding(left=pads)


def padded_key_range_array(pads, S):
    """The same key_ranges over S keys as a (B, 2) int32 array made from Python (each step's own:
    S grows), which every call reads back on the host."""
    return mx.array([[p, S - p] for p in pads], dtype=mx.int32)


def padded_mask(pads, S):
    """The boolean mask (B, 1, 1, S) those key_ranges stand for, made with MLX ops each call: the
    peers' (mx.fast.scaled_dot_product_attention) way to the same left-padded batch."""
    return mx.arange(S)[None, None, None, :] >= mx.array(pads)[:, None, None, None]


def make_case(B, S, fmt, H_q=32, H_kv=8, D=128, L=1, qdtype=mx.bfloat16, group_size=64, seed=0):
    """Random q/k/v (or quantized k/v) for one benchmark shape, evaluated."""
    mx.random.seed(seed)
    dtype = qdtype if is_quantized(fmt) else FLOAT_FORMATS[fmt]
    q = mx.random.normal((B, H_q, L, D)).astype(dtype)
    k = mx.random.normal((B, H_kv, S, D)).astype(dtype)
    v = mx.random.normal((B, H_kv, S, D)).astype(dtype)
    case = {"q": q, "scale": D**-0.5, "fmt": fmt, "B": B, "S": S}
    if is_quantized(fmt):
        bits = int(fmt[1:])
        case["bits"], case["group_size"] = bits, group_size
        case["kq"] = fa.quantize_kv(k, bits=bits, group_size=group_size)
        case["vq"] = fa.quantize_kv(v, bits=bits, group_size=group_size)
        case["kv_bytes"] = sum(a.nbytes for a in (*case["kq"], *case["vq"]))
        mx.eval(q, case["kq"], case["vq"])
        case["k"] = case["v"] = None  # the float cache is not kept: only the quantized one is read
    else:
        case["k"], case["v"] = k, v
        case["kv_bytes"] = k.nbytes + v.nbytes
        mx.eval(q, k, v)
    return case


def _torch_sdpa():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    return torch, F


def cold_cases(B, S, fmt, cold_bytes, **shape):
    """make_case copies of one shape (other seeds), enough to hold cold_bytes of K/V; one when
    cold_bytes is 0."""
    cases = [make_case(B, S, fmt, **shape)]
    count = max(1, -(-cold_bytes // cases[0]["kv_bytes"]))
    return cases + [make_case(B, S, fmt, seed=seed, **shape) for seed in range(1, count)]


class Chain:
    """Where each call's query comes from. Off: the case's own query, so that queued calls are
    independent (and on a GPU MLX may run them side by side). On (--chain): the previous
    output of the same implementation, one chain across the cache copies, so that its calls run
    one after the other, as a model's layers do in a decode step."""

    def __init__(self, on=False):
        self.on = on
        self.last = {}

    def query(self, name, q):
        return self.last.get(name, q) if self.on else q

    def keep(self, name, out):
        if self.on:
            self.last[name] = out
        return out


def in_turn(cases, backends, chain=False):
    """implementations() of every copy, each name calling its copies in turn."""
    links = Chain(chain)
    per_copy = [implementations(case, backends, links) for case in cases]
    if len(per_copy) == 1:
        return per_copy[0]
    turns = {}
    for name in per_copy[0]:
        fns = itertools.cycle([impls[name] for impls in per_copy])
        turns[name] = lambda fns=fns: next(fns)()
    return turns


def implementations(case, backends, chain=None):
    """name -> zero-argument callable returning an mx.array (or a synced torch tensor); `chain`
    (a Chain, off by default) says where each call's query comes from."""
    chain = chain or Chain()
    q, scale = case["q"], case["scale"]
    impls = {}

    def linked(name, run):
        return lambda: chain.keep(name, run(chain.query(name, q)))

    if is_quantized(case["fmt"]):
        kq, vq, bits, gs = case["kq"], case["vq"], case["bits"], case["group_size"]
        for name in backends:
            impls[name] = linked(name, lambda q, name=name: fa.quantized_decode_attention(
                q, kq, vq, scale=scale, bits=bits, group_size=gs, backend=name))
        try:
            from mlx_lm.models.base import quantized_scaled_dot_product_attention as qsdpa
        except ImportError:
            qsdpa = None
        if qsdpa is not None:
            # mlx_lm scales its queries in place (`queries *= scale`): hand it a fresh array.
            impls["mlx_lm.qsdpa"] = linked("mlx_lm.qsdpa", lambda q: qsdpa(
                q + 0, kq, vq, scale, None, group_size=gs, bits=bits))

        def dequant_sdpa(q):
            k = mx.dequantize(*kq, group_size=gs, bits=bits)
            v = mx.dequantize(*vq, group_size=gs, bits=bits)
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)

        impls["dequant+sdpa"] = linked("dequant+sdpa", dequant_sdpa)
    else:
        k, v = case["k"], case["v"]
        for name in backends:
            impls[name] = linked(name, lambda q, name=name: fa.decode_attention(q, k, v, scale=scale, backend=name))
        impls["mx.fast.sdpa"] = linked("mx.fast.sdpa", lambda q: mx.fast.scaled_dot_product_attention(
            q, k, v, scale=scale))
        torch_mods = _torch_sdpa()
        if torch_mods is not None:
            impls["torch.sdpa"] = _torch_impl(torch_mods, q, k, v, scale, chain)
    return impls


def _torch_impl(torch_mods, q, k, v, scale, chain):
    torch, F = torch_mods
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tdtype = {mx.float32: torch.float32, mx.float16: torch.float16, mx.bfloat16: torch.bfloat16}[q.dtype]

    def to_torch(x):
        return torch.from_numpy(np.asarray(x.astype(mx.float32))).to(device=device, dtype=tdtype)

    tq, tk, tv = to_torch(q), to_torch(k), to_torch(v)

    def run():
        out = F.scaled_dot_product_attention(chain.query("torch.sdpa", tq), tk, tv, scale=scale, enable_gqa=True)
        chain.keep("torch.sdpa", out)
        if device == "cuda":
            torch.cuda.synchronize()
        return mx.array(0)  # time_call evaluates this; the torch work is already done

    return run


# --- the sweep ---------------------------------------------------------------------------------


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
    p = argparse.ArgumentParser(prog="python -m fusedattend bench", description=__doc__.split("\n")[0])
    p.add_argument("--B", type=_csv(_positive), default=[1, 8], help="batch sizes (comma list)")
    p.add_argument("--S", type=_csv(_positive), default=[1024, 4096, 16384], help="cache lengths")
    p.add_argument("--formats", type=_csv(str), default=["float32", "bfloat16", "q4"],
                   help="float32, bfloat16, float16 and/or qN (N-bit K/V: q2, q4, q8)")
    p.add_argument("--qdtype", default="bfloat16", choices=list(FLOAT_FORMATS),
                   help="query (and scales) dtype of the quantized formats")
    p.add_argument("--group-size", type=_positive, default=64)
    p.add_argument("--backends", type=_csv(str), default=None,
                   help="fusedattend backends (default: all available here)")
    p.add_argument("--no-peers", action="store_true", help="time the fusedattend backends only")
    p.add_argument("--H-q", type=_positive, default=32)
    p.add_argument("--H-kv", type=_positive, default=8)
    p.add_argument("--D", type=_positive, default=128)
    p.add_argument("--L", type=_positive, default=1)
    p.add_argument("--repeats", type=_positive, default=7, help="samples per implementation (best is reported)")
    p.add_argument("--inner", type=_positive, default=8 if on_gpu else 1,
                   help="calls queued per mx.eval (amortises GPU launch latency)")
    p.add_argument("--budget", type=_seconds, default=3.0, help="stop repeating one timing after this many seconds")
    p.add_argument("--cold-mb", type=_at_least(int, 0, "an int >= 0"), default=0, metavar="N",
                   help="consecutive calls read different copies of the cache, N MB in all (0: one cache)")
    p.add_argument("--chain", action="store_true",
                   help="each call's query is the previous call's output: calls run one after the other, "
                        "as a model's layers do (default: independent calls, which a GPU may overlap)")
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
