"""The benchmark harness: timing, benchmark cases, and the implementations timed side by side.

`python -m fusedattend bench` (fusedattend.benchmarks.cli) sweeps shapes with it, and tests/perf
times its rows with the same helpers (`time_call`, `memory_read_bandwidth`, `make_case`,
`implementations`), so that a sweep and a perf baseline measure alike.

Peers timed beside the fusedattend backends, where they apply:

    mx.fast.sdpa       mx.fast.scaled_dot_product_attention on the float K/V
    mlx_lm.qsdpa       mlx_lm.models.base.quantized_scaled_dot_product_attention (quantized)
    dequant+sdpa       mx.dequantize the cache, then mx.fast.scaled_dot_product_attention
    torch.sdpa         torch.nn.functional.scaled_dot_product_attention, when torch imports
"""

from __future__ import annotations

import gc
import itertools
import sys
import time

import mlx.core as mx
import numpy as np

import fusedattend as fa

FLOAT_FORMATS = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
FUSED_BACKENDS = fa.BACKENDS


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
    peers timed after ours read more keys a step (up to 2.5x at S = 2048 before 2026-12-02)."""
    keys = itertools.count()

    def run():
        x = x0
        for _ in range(steps):
            x = step(x, S + next(keys) % room)
            if each_step:
                mx.eval(x)
        return x

    return run


# Left-padded batches (tests/perf's padded decode loops): request b's
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
