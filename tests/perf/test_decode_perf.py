"""Decode-attention benchmarks: each fusedattend backend here, with its peers timed in the same run.

Shapes: H_q=32, H_kv=8, D=128, L=1; bfloat16 and 4-bit (bfloat16 queries/scales) K/V.
On a GPU the grid is B in {1, 8, 32} x S in {512, 2048, 8192, 32768}; on a CPU a smaller one
(peers there take up to seconds per call). extra_info holds kv_bytes, gbps, calls_per_round and
ratio_<peer> = peer time / backend time (> 1: the backend is faster).

On a GPU each round queues QUEUED_CALLS calls and evaluates them once, as `fusedattend bench`
does, so the stored times are per round of that many calls. One call a round timed mostly the
host's dispatch and the sync: on the H200 its spread reached 4x the median, and unchanged
kernels failed `ci/perf.sh compare` at 6 of 24 shapes (docs/decisions/perf-queued-rounds.md).
"""

import statistics

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend.benchmarks import harness as bench

ON_GPU = mx.default_device() == mx.gpu
if ON_GPU:
    SHAPES = [(B, S) for B in (1, 8, 32) for S in (512, 2048, 8192, 32768)]
else:
    SHAPES = [(1, 512), (1, 2048), (1, 8192), (8, 512), (8, 2048)]
FORMATS = ["bfloat16", "q4"]
PEERS = ("reference", "mx.fast.sdpa", "mlx_lm.qsdpa", "dequant+sdpa", "torch.sdpa")
QUEUED_CALLS = 20 if ON_GPU else 1
ROUNDS = 11 if ON_GPU else 5
_cases = {}


def _case(B, S, fmt, **shape):
    key = (B, S, fmt, tuple(sorted(shape.items())))
    if key not in _cases:
        _cases.clear()  # one shape's cache at a time: the large ones are GBs
        bench.release_memory()
        _cases[key] = bench.make_case(B, S, fmt, **shape)
    return key, _cases[key]


def _benchmark_stat(benchmark, name):
    """The benchmark's statistic `name` (median, min) in seconds, or None where pytest-benchmark
    is disabled (xdist)."""
    stats = getattr(benchmark, "stats", None)
    return getattr(stats.stats, name) if stats is not None and getattr(stats, "stats", None) is not None else None


def _round_seconds(benchmark, fn, name="median"):
    """The benchmark's statistic; pytest-benchmark is disabled under xdist, so time it ourselves then."""
    value = _benchmark_stat(benchmark, name)
    return value if value is not None else min(bench.time_call(fn, repeats=3))


def run_benchmark(benchmark, peer_times, backend, B, S, fmt, rounds=ROUNDS, queued=QUEUED_CALLS, **shape):
    key, case = _case(B, S, fmt, **shape)
    impls = bench.implementations(case, [backend, "reference"] if backend != "reference" else [backend])
    ours = impls.pop(backend)

    def calls():
        mx.eval([ours() for _ in range(queued)])

    benchmark.group = f"{fmt} B={B} S={S}"
    benchmark.pedantic(calls, rounds=rounds, iterations=1, warmup_rounds=1)
    seconds = _round_seconds(benchmark, calls) / queued  # a call's
    # A peer's ratio compares best rounds: the peer's fastest sample against our fastest round.
    # Medians against a minimum read a noisy run as a slower one: on a loaded 2-core CI box our
    # median rose 2.26x while MLX's best sample rose 1.16x (docs/decisions/perf-compare-peer-gauge.md).
    best = _round_seconds(benchmark, calls, "min") / queued
    info = benchmark.extra_info
    info.update(backend=backend, format=fmt, B=B, S=S, kv_bytes=case["kv_bytes"], calls_per_round=queued,
                gbps=case["kv_bytes"] / seconds / 1e9)
    for peer, fn in impls.items():
        if peer not in PEERS:
            continue
        if (key, peer) not in peer_times:
            peer_times[(key, peer)] = bench.time_call(fn, repeats=3, inner=queued, budget_s=5.0)
        samples = peer_times[(key, peer)]
        info[f"ratio_{peer}"] = min(samples) / best
        if samples.inner < queued:  # fewer fit in memory (dequant+sdpa at the largest shape)
            info[f"queued_{peer}"] = samples.inner
    return info


@pytest.mark.perf
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,S", SHAPES, ids=[f"B{B}-S{S}" for B, S in SHAPES])
def test_decode(benchmark, peer_times, backend, B, S, fmt):
    # `backend` is parametrized by the root conftest: every backend here, or those given by --backend.
    run_benchmark(benchmark, peer_times, backend, B, S, fmt)


# Decode loops (GPU only): a round is QUEUED_CALLS chained steps (each step's query the step
# before's output), each on a slice of the cache one key longer than the step before (as mlx_lm's
# caches hand them out), from S on and growing across rounds up to S + LOOP_ROOM
# (bench.growing_loop). Such calls are replayed with S out of their signature (backends.replay).
# The peer is MLX's SDPA on the same slices of the cache in bf16 (for 4-bit too: mlx_lm's 4-bit
# path raises on slices on CUDA), timed as ours is (a warm-up round, the median of ROUNDS) on a
# loop of its own with the same sequence of S. Until 2026-12-02 the peer continued ours' sequence
# and read more keys a step (its timed rounds S + 260 to S + 319 against ours' S + 20 to
# S + 239), and took the best of 3 rounds. kv_bytes and gbps count the loop's first step (S keys).
# Short loops (S = 64, added 2026-12-02) grow only to SHORT_LOOP_END - 1 keys, so every step is
# one launch (Policy.single_pass_max_s): no row timed such steps when each of them made a kernel
# input on the host (until a74e2dd: 3.7-4.9x slower with every step evaluated;
# commit d205b41: docs/h200/host-arrays/) and set its launch up afresh (until 1a927bc; commit d205b41: docs/h200/one-launcher/).
LOOP_SHAPES = [(B, S) for B in (1, 8, 32) for S in (64, 2048, 32768)]
LOOP_ROOM = 1024  # keys a loop's cache grows by before it starts over from S
SHORT_LOOP_END = 512
LOOP_GROUP_SIZE = 64


def loop_room(S):
    """Keys a loop from S grows by before it starts over."""
    return SHORT_LOOP_END - S if S < SHORT_LOOP_END else LOOP_ROOM


@pytest.mark.perf
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,S", LOOP_SHAPES, ids=[f"B{B}-S{S}" for B, S in LOOP_SHAPES])
def test_decode_loop(benchmark, backend, B, S, fmt):
    run_loop(benchmark, backend, B, S, fmt)


# The same loops with every step evaluated before the next (a server that reads each step's
# token): no queue hides the host's work or a kernel's wait for memory the host wrote that step.
EACH_STEP_SHAPES = [(B, S) for B in (1, 8, 32) for S in (64, 2048)]


@pytest.mark.perf
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,S", EACH_STEP_SHAPES, ids=[f"B{B}-S{S}" for B, S in EACH_STEP_SHAPES])
def test_decode_loop_each_step(benchmark, backend, B, S, fmt):
    run_loop(benchmark, backend, B, S, fmt, each_step=True)


# Padded batches (left-padded: bench.left_pads): every step passes one KeyRanges.from_padding made
# before the loop (bench.padded_key_ranges), as a server makes it when requests join or leave;
# such calls replay their launches since 6e60b02 and compare the ranges' min_keys with S. Up to
# baseline 0036 the rows passed a (B, 2) array made from Python each step and read back on the
# host every call. The peer is MLX's SDPA with the boolean mask those ranges stand for, made with
# MLX ops each step.
PADDED_SHAPES = [(B, S) for B in (8, 32) for S in (2048, 32768)]


@pytest.mark.perf
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,S", PADDED_SHAPES, ids=[f"B{B}-S{S}" for B, S in PADDED_SHAPES])
def test_padded_decode_loop(benchmark, backend, B, S, fmt):
    run_loop(benchmark, backend, B, S, fmt, pads=bench.left_pads(B))


def run_loop(benchmark, backend, B, S, fmt, pads=None, each_step=False):
    """A decode loop's benchmark (GPU backends only): QUEUED_CALLS steps a round; with `pads`,
    request b sees its keys from pads[b] on, through key_ranges (ours) or a mask (MLX's SDPA);
    with `each_step`, each step evaluated before the next."""
    if not ON_GPU or backend == "reference":
        pytest.skip("decode loops: GPU backends only")
    room = loop_room(S)
    _, case = _case(B, S + room, "bfloat16")
    k, v = case["k"], case["v"]
    quantized = bench.is_quantized(fmt)
    if quantized:
        bits = int(fmt[1:])
        k, v = (fa.quantize_kv(x, bits=bits, group_size=LOOP_GROUP_SIZE) for x in (k, v))
        mx.eval(k, v)

    key_ranges = None if pads is None else bench.padded_key_ranges(pads)  # one for every step

    def ours(x, keys):
        kv = bench.first_keys(k, keys), bench.first_keys(v, keys)
        if quantized:
            return fa.quantized_decode_attention(x, *kv, scale=case["scale"], bits=bits, group_size=LOOP_GROUP_SIZE,
                                                 key_ranges=key_ranges, backend=backend)
        return fa.decode_attention(x, *kv, scale=case["scale"], key_ranges=key_ranges, backend=backend)

    def sdpa(x, keys):
        mask = None if pads is None else bench.padded_mask(pads, keys)
        return mx.fast.scaled_dot_product_attention(x, bench.first_keys(case["k"], keys),
                                                    bench.first_keys(case["v"], keys), scale=case["scale"], mask=mask)

    def loop(step):  # a loop of its own for each implementation: the same S sequence for each
        return bench.growing_loop(step, case["q"], S, QUEUED_CALLS, room, each_step=each_step)

    def loop_seconds(run):  # the benchmark's protocol: a warm-up round, then the median of ROUNDS
        return statistics.median(bench.time_call(run, repeats=ROUNDS))

    benchmark.group = f"{'loop' if pads is None else 'padded loop'}{' each step' if each_step else ''} {fmt} B={B} S={S}"
    run = loop(ours)
    benchmark.pedantic(lambda: mx.eval(run()), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    median = _benchmark_stat(benchmark, "median")
    seconds = (median if median is not None else loop_seconds(loop(ours))) / QUEUED_CALLS
    kv_bytes = sum(x.nbytes for x in (*k, *v)) if quantized else k.nbytes + v.nbytes
    kv_bytes = kv_bytes * S // (S + room)
    info = benchmark.extra_info
    info.update(backend=backend, format=fmt, B=B, S=S, kv_bytes=kv_bytes, calls_per_round=QUEUED_CALLS,
                gbps=kv_bytes / seconds / 1e9, grows_by=room)
    if pads is not None:
        info["pads"] = pads
    if each_step:
        info["each_step"] = True
    info["ratio_mx.fast.sdpa"] = loop_seconds(loop(sdpa)) / QUEUED_CALLS / seconds


@pytest.mark.smoke
@pytest.mark.parametrize("fmt", ["bfloat16", "q4"])
def test_smoke_harness(benchmark, peer_times, fmt):
    """A tiny shape through the whole harness (default run, with or without xdist)."""
    backend = fa.default_backend()
    info = run_benchmark(benchmark, peer_times, backend, 1, 64, fmt, rounds=2, H_q=4, H_kv=2, D=64)
    assert info["kv_bytes"] > 0 and info["gbps"] > 0
    ratios = [k for k in info if k.startswith("ratio_")]
    assert ratios and all(info[k] > 0 for k in ratios)
