"""Internals of the "cpu" backend: block boundaries, unpacking, zero-copy views, exact batch invariance."""

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import cpu

pytestmark = pytest.mark.skipif("cpu" not in fa.available_backends(), reason="cpu backend unavailable")
TOL = {mx.float32: 2e-5, mx.bfloat16: 2e-2, mx.float16: 4e-3}
BLK = cpu.KEY_BLOCK


def _qkv(B, H_q, H_kv, L, S, D, dtype, seed=0):
    mx.random.seed(seed)
    return tuple(mx.random.normal(s).astype(dtype) for s in ((B, H_q, L, D), (B, H_kv, S, D), (B, H_kv, S, D)))


def _reference(*args, quantized=False, **kwargs):
    """The reference backend on the CPU stream, as the "cpu" backend computes: on a GPU machine
    MLX's default stream is the GPU's, whose float32 products differed from these by up to
    6e-5 (the H200, docs/h200/schedule-keys/call133)."""
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
