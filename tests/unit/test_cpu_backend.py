"""Internals of the "cpu" backend: block boundaries, unpacking, zero-copy views, exact batch invariance,
its threads (one level: BLAS single-threaded in our workers; any worker count, the same bits)."""

import threading
import warnings

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import cpu, cpu_threads

pytestmark = pytest.mark.skipif("cpu" not in fa.available_backends(), reason="cpu backend unavailable")
TOL = {mx.float32: 2e-5, mx.bfloat16: 2e-2, mx.float16: 4e-3}
BLK = cpu.KEY_BLOCK


def _qkv(B, H_q, H_kv, L, S, D, dtype, seed=0):
    mx.random.seed(seed)
    return tuple(mx.random.normal(s).astype(dtype) for s in ((B, H_q, L, D), (B, H_kv, S, D), (B, H_kv, S, D)))


def _reference(*args, quantized=False, **kwargs):
    """The reference backend on the CPU stream, as the "cpu" backend computes: on a GPU machine
    MLX's default stream is the GPU's, whose float32 products differed from these by up to
    6e-5 (H200, d205b41) and 4.2e-5 (H100, 970e78a)."""
    with mx.stream(mx.cpu):
        attend = fa.quantized_decode_attention if quantized else fa.decode_attention
        return attend(*args, backend="reference", **kwargs)


def _close(a, b, dtype):
    assert a.dtype == b.dtype
    err = mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()
    assert err <= TOL[dtype], err


@pytest.mark.parametrize("S", [1, BLK - 1, BLK, BLK + 1, 2 * BLK + 1])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_block_boundaries_match_reference(S, dtype, mask):
    q, k, v = _qkv(2, 8, 2, 3, S, 64, dtype)
    for ranges in (None, mx.array([[0, S], [S // 3, S - S // 3]], dtype=mx.int32)):
        out = fa.decode_attention(q, k, v, mask=mask, key_ranges=ranges, backend="cpu")
        ref = _reference(q, k, v, mask=mask, key_ranges=ranges)
        _close(out, ref, dtype)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_unpacking_matches_mx_dequantize(bits, group_size, dtype):
    mx.random.seed(bits * group_size)
    x = mx.random.normal((2, 3, 37, 128)).astype(dtype)
    codes, scales, biases = mx.quantize(x, group_size=group_size, bits=bits)
    mx.eval(codes, scales, biases)
    phases = cpu._code_phases(
        np.asarray(codes), cpu._numpy_view(scales), cpu._numpy_view(biases), bits, group_size, "t"
    )
    P = len(phases)
    got = np.empty((2, 3, 37, 128), np.float32)
    for p, ph in enumerate(phases):
        got[..., p::P] = ph
    want = np.asarray(mx.dequantize(codes, scales.astype(mx.float32), biases.astype(mx.float32),
                                    group_size=group_size, bits=bits))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_bfloat16_widening_is_exact():
    x = mx.random.normal((4, 130, 64)).astype(mx.bfloat16)
    even, odd = cpu._float_phases(cpu._numpy_view(x), "t")
    want = np.asarray(x.astype(mx.float32))
    assert np.array_equal(even, want[..., 0::2]) and np.array_equal(odd, want[..., 1::2])


def test_views_are_zero_copy_including_cache_slices():
    cache = mx.random.normal((1, 2, 1000, 64)).astype(mx.bfloat16)
    mx.eval(cache)
    whole, part = cpu._numpy_view(cache), cpu._numpy_view(cache[:, :, 10:300, :])
    offset = part.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
    assert offset == 10 * 64 * 2 and part.strides == whole.strides


@pytest.mark.parametrize("seed", range(6))
def test_batch_and_layer_invariance_bit_exact(seed):
    rng = np.random.default_rng(seed)
    dtype = [mx.float32, mx.bfloat16, mx.float16][seed % 3]
    H_kv = int(rng.choice([1, 2, 4]))
    H_q = H_kv * int(rng.choice([1, 2, 4]))
    B, NL, L = int(rng.integers(1, 5)), int(rng.integers(1, 3)), int(rng.integers(1, 9))
    S = int(rng.choice([1, BLK - 1, BLK + 1, 3 * BLK + 7]))
    D = 32
    mx.random.seed(seed)
    q = mx.random.normal((NL, B, H_q, L, D)).astype(dtype)
    big = mx.random.normal((NL, B, H_kv, S + 50, D)).astype(dtype)  # non-contiguous cache slices
    k, v = big[..., :S, :], (big * 0.5)[..., 5 : S + 5, :]
    starts = rng.integers(0, S + 1, B)
    lengths = np.array([rng.integers(0, S - s + 1) for s in starts])
    ranges = mx.array(np.stack([starts, lengths], 1).astype(np.int32))
    mask = "causal" if seed % 2 else mx.array(rng.random((1, B, H_q, L, S)) > 0.3)
    full = fa.decode_attention(q, k, v, mask=mask, key_ranges=ranges, backend="cpu")
    ref = _reference(q, k, v, mask=mask, key_ranges=ranges)
    _close(full, ref, dtype)
    per_request = mx.concatenate([
        fa.decode_attention(q[:, b : b + 1], k[:, b : b + 1], v[:, b : b + 1],
                            mask=mask if isinstance(mask, str) else mask[:, b : b + 1],
                            key_ranges=ranges[b : b + 1], backend="cpu")
        for b in range(B)], axis=1)
    assert mx.array_equal(full, per_request).item()
    per_layer = mx.stack([
        fa.decode_attention(q[l], k[l], v[l], mask=mask if isinstance(mask, str) else mask[0],
                            key_ranges=ranges, backend="cpu")
        for l in range(NL)])
    assert mx.array_equal(full, per_layer).item()


def test_hidden_garbage_never_leaks_and_hidden_rows_are_zero():
    q, k, v = _qkv(2, 4, 2, 2, BLK + 3, 32, mx.float32)
    poison = mx.full(k.shape, float("nan"))
    keys = mx.arange(BLK + 3).reshape(1, 1, -1, 1)
    k = mx.where(keys >= BLK, poison, k)  # hidden by key_ranges for request 0
    v = mx.where(keys >= BLK, poison, v)
    ranges = mx.array([[0, BLK], [0, 0]], dtype=mx.int32)  # request 1 sees nothing
    out = fa.decode_attention(q, k, v, key_ranges=ranges, backend="cpu")
    assert not mx.any(mx.isnan(out)).item()
    assert mx.array_equal(out[1], mx.zeros_like(out[1])).item()
    additive = mx.where(keys.reshape(1, 1, 1, -1) >= BLK, -mx.inf, 0.0)
    out2 = fa.decode_attention(q[:1], k[:1], v[:1], mask=additive, backend="cpu")
    _close(out2, out[:1], mx.float32)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantized_matches_reference_and_is_batch_invariant(bits):
    q, k, v = _qkv(3, 8, 2, 2, BLK + 1, 64, mx.bfloat16, seed=bits)
    kq, vq = fa.quantize_kv(k, bits=bits), fa.quantize_kv(v, bits=bits)
    ranges = mx.array([[0, BLK + 1], [3, 100], [BLK, 1]], dtype=mx.int32)
    out = fa.quantized_decode_attention(q, kq, vq, bits=bits, mask="causal", key_ranges=ranges, backend="cpu")
    ref = _reference(q, kq, vq, quantized=True, bits=bits, mask="causal", key_ranges=ranges)
    _close(out, ref, mx.bfloat16)
    one = [fa.quantized_decode_attention(q[b : b + 1], tuple(x[b : b + 1] for x in kq),
                                         tuple(x[b : b + 1] for x in vq), bits=bits, mask="causal",
                                         key_ranges=ranges[b : b + 1], backend="cpu") for b in range(3)]
    assert mx.array_equal(out, mx.concatenate(one)).item()


# --- threads ---------------------------------------------------------------------------------


def _thread_cases():
    """(name, call) pairs covering head chunks (S = 1024: one block), several blocks, masks, GQA,
    bfloat16 phases and 4-bit codes."""
    cases = []
    for dtype in (mx.float32, mx.bfloat16):
        for S in (BLK, 3 * BLK + 5):
            q, k, v = _qkv(2, 16, 8, 2, S, 64, dtype, seed=S)
            ranges = mx.array([[0, S], [7, S - 100]], dtype=mx.int32)
            cases.append((f"{dtype} S={S}", lambda q=q, k=k, v=v, r=ranges: fa.decode_attention(
                q, k, v, mask="causal", key_ranges=r, backend="cpu")))
    q, k, v = _qkv(1, 8, 4, 1, 2 * BLK + 3, 64, mx.bfloat16, seed=9)
    mask = mx.array(np.random.default_rng(1).random((1, 8, 1, 2 * BLK + 3)) > 0.5)
    cases.append(("bool mask", lambda: fa.decode_attention(q, k, v, mask=mask, backend="cpu")))
    kq, vq = fa.quantize_kv(k, bits=4), fa.quantize_kv(v, bits=4)
    cases.append(("q4", lambda: fa.quantized_decode_attention(q, kq, vq, bits=4, backend="cpu")))
    return cases


def test_results_bit_identical_across_thread_counts(monkeypatch):
    monkeypatch.delenv(cpu_threads.THREADS_ENV, raising=False)
    default = cpu_threads.threads()
    cases = _thread_cases()
    want = {name: np.asarray(call().astype(mx.float32)) for name, call in cases}
    for n in sorted({1, 2, 3, default}):
        monkeypatch.setenv(cpu_threads.THREADS_ENV, str(n))
        for name, call in cases:
            got = np.asarray(call().astype(mx.float32))
            assert np.array_equal(got, want[name], equal_nan=True), (name, n, default)


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_bad_thread_count_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(cpu_threads.THREADS_ENV, raw)
    q, k, v = _qkv(1, 2, 1, 1, 8, 32, mx.float32)
    with pytest.raises(ValueError, match=cpu_threads.THREADS_ENV):
        fa.decode_attention(q, k, v, backend="cpu")


def test_head_chunks_cover_every_head_once():
    for H_kv in (1, 3, 8):
        for blocks in (0, 1, 3, 64):
            for workers in (1, 2, 8):
                chunks = cpu._head_chunks(H_kv, blocks, workers)
                assert [h for a, b in chunks for h in range(a, b)] == list(range(H_kv))
    assert cpu._head_chunks(8, 1, 2) == [(0, 4), (4, 8)]  # the docstring's example


def _blas_threads():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    return [lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]


def test_blas_single_threaded_in_workers_and_restored_after(monkeypatch):
    before = _blas_threads()
    if not before:
        pytest.skip("threadpoolctl finds no BLAS here")
    seen = []
    real = cpu._block_partial

    def spy(*args):
        seen.append((threading.current_thread().name, tuple(_blas_threads())))
        return real(*args)

    monkeypatch.setattr(cpu, "_block_partial", spy)
    monkeypatch.setenv(cpu_threads.THREADS_ENV, "2")
    q, k, v = _qkv(1, 8, 2, 1, 3 * BLK, 32, mx.float32)
    fa.decode_attention(q, k, v, backend="cpu")
    assert seen and all(n.startswith("fusedattend-cpu") and set(t) == {1} for n, t in seen), seen
    assert _blas_threads() == before


def test_concurrent_calls_agree_and_restore_blas(monkeypatch):
    before = _blas_threads()
    q, k, v = _qkv(2, 8, 2, 1, 2 * BLK + 1, 64, mx.bfloat16)
    want = np.asarray(fa.decode_attention(q, k, v, backend="cpu").astype(mx.float32))
    got, errors = [], []

    def call():
        try:
            for _ in range(3):
                got.append(np.asarray(fa.decode_attention(q, k, v, backend="cpu").astype(mx.float32)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    callers = [threading.Thread(target=call) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not errors and len(got) == 9 and all(np.array_equal(g, want) for g in got)
    assert _blas_threads() == before


def test_accelerate_per_thread_setting(monkeypatch):
    """Accelerate's BLASSetThreading is per thread: every worker sets it once, the caller's thread
    is set around a call and given back its own value (simulated: no Accelerate here)."""
    calls, state = [], {}

    def set_(value):
        calls.append((threading.current_thread().name, value))
        state[threading.get_ident()] = value
        return 0

    fake = cpu_threads._Blas.__new__(cpu_threads._Blas)
    fake.controller, fake.accelerate, fake.can_limit = None, (set_, lambda: state.get(threading.get_ident(), 0)), True
    fake.users, fake.limiter, fake.lock = 0, None, threading.Lock()
    monkeypatch.setattr(cpu_threads, "_blas_state", fake)
    monkeypatch.setattr(cpu_threads, "_pools", {})
    monkeypatch.delenv(cpu_threads.THREADS_ENV, raising=False)
    monkeypatch.setattr(cpu_threads, "MAX_THREADS", 3)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    q, k, v = _qkv(1, 8, 4, 1, 4 * BLK, 32, mx.float32)
    want = _reference(q, k, v)
    _close(fa.decode_attention(q, k, v, backend="cpu"), want, mx.float32)
    me = threading.current_thread().name
    workers = {n for n, _ in calls if n != me}
    assert workers and all(v == 1 for n, v in calls if n != me)
    assert [v for n, v in calls if n == me] == [1, 0]  # single for the call, then its own back
    for pool in cpu_threads._pools.values():
        pool.shutdown()


def test_no_accelerate_nor_threadpoolctl_means_one_level_of_blas(monkeypatch):
    fake = cpu_threads._Blas.__new__(cpu_threads._Blas)
    fake.controller = fake.accelerate = None
    fake.can_limit, fake.users, fake.limiter, fake.lock = False, 0, None, threading.Lock()
    monkeypatch.setattr(cpu_threads, "_blas_state", fake)
    monkeypatch.delenv(cpu_threads.THREADS_ENV, raising=False)
    assert cpu_threads.threads() == 1


def test_nan_rows_raise_no_numpy_warning():
    """+inf reaching a score makes the row NaN (inf - inf) on purpose; numpy must not warn about
    it, and the process's numpy error state stays as it was."""
    q, k, v = _qkv(1, 4, 2, 1, 2 * BLK + 3, 32, mx.float32)
    mask = mx.zeros((1, 4, 1, 2 * BLK + 3)).at[..., 5].add(mx.inf)
    errstate = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fa.decode_attention(q, k, v, mask=mask, backend="cpu")
    assert mx.all(mx.isnan(out)).item()
    assert np.geterr() == errstate
