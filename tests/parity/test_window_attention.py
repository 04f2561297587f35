"""windowed_decode_attention against float64 attention (fusedattend.conformance.oracle, which
shares no code with the package) over each request's quantized keys dequantized by the oracle,
then its window keys: the one sequence the call's docstring defines."""

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend.conformance import oracle
from fusedattend.conformance.grids import np_of

H_Q, H_KV, D = 8, 2, 64
# Of the largest output: float32 rounding over a few hundred keys; half a bfloat16 step.
TOLERANCE = {mx.float32: 2e-5, mx.bfloat16: 8e-3}

# (quantized (start, length) a request, window (start, length) a request, L, bits): a request with no
# quantized key, one with no window key, ranges not at 0, one key, L up to the fused 8, a virtual
# sequence crossing the cpu backend's 1024-key block inside its quantized part and at the boundary.
CASES = [
    ([(0, 40), (3, 20), (0, 0)], [(0, 5), (0, 16), (2, 9)], 1, 4),
    ([(0, 1)], [(0, 1)], 1, 2),
    ([(0, 0), (0, 7)], [(1, 1), (0, 0)], 3, 8),
    ([(0, 1030), (0, 1024)], [(0, 3), (0, 17)], 2, 4),
    ([(0, 1023), (5, 1000)], [(0, 31), (0, 32)], 8, 4),
]


def _oracle(q, K, V, kw, vw, qr, wr, bits, causal):
    """Per request: dequantized (oracle.dequantize) keys of its quantized range, then its window."""
    outs = []
    for b in range(q.shape[0]):
        (qs, ql), (ws, wl) = qr[b], wr[b]
        k = [oracle.dequantize(np.array(K[0][b:b + 1]), np_of(K[1][b:b + 1]), np_of(K[2][b:b + 1]), bits=bits,
                               group_size=64)[:, :, qs:qs + ql], np_of(kw[b:b + 1])[:, :, ws:ws + wl]]
        v = [oracle.dequantize(np.array(V[0][b:b + 1]), np_of(V[1][b:b + 1]), np_of(V[2][b:b + 1]), bits=bits,
                               group_size=64)[:, :, qs:qs + ql], np_of(vw[b:b + 1])[:, :, ws:ws + wl]]
        k, v = np.concatenate(k, axis=2), np.concatenate(v, axis=2)
        if k.shape[2] == 0:  # no key at all: zeros
            outs.append(np.zeros((1, H_Q, q.shape[2], D)))
            continue
        outs.append(oracle.attention(np_of(q[b:b + 1]), k, v, scale=D**-0.5, mask="causal" if causal else None))
    return np.concatenate(outs)


def _inputs(B, S_q, S_w, L, dtype, bits, seed):
    keys = [mx.random.normal(shape, key=mx.random.key(seed * 10 + i)).astype(dtype) for i, shape in
            enumerate([(B, H_Q, L, D), (B, H_KV, S_q, D), (B, H_KV, S_q, D), (B, H_KV, S_w, D), (B, H_KV, S_w, D)])]
    q, kq, vq, kw, vw = keys
    return q, fa.quantize_kv(kq, bits=bits), fa.quantize_kv(vq, bits=bits), kw, vw


@pytest.mark.parametrize("qr, wr, L, bits", CASES, ids=[f"B{len(c[0])}_L{c[2]}_{c[3]}bit" for c in CASES])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_against_float64_attention(qr, wr, L, bits, dtype, backend):
    S_q = max(s + n for s, n in qr)
    S_w = max(s + n for s, n in wr)
    q, K, V, kw, vw = _inputs(len(qr), S_q, S_w, L, dtype, bits, seed=L + bits)
    for causal in (False, True) if L > 1 else (False,):
        out = fa.windowed_decode_attention(q, K, V, kw, vw, key_ranges=fa.KeyRanges(qr),
                                           window_ranges=fa.KeyRanges(wr), mask="causal" if causal else None,
                                           bits=bits, backend=backend)
        assert out.dtype == dtype and out.shape == q.shape
        expected = _oracle(q, K, V, kw, vw, qr, wr, bits, causal)
        err = np.abs(np_of(out) - expected).max()
        assert err <= TOLERANCE[dtype] * max(1.0, np.abs(expected).max()), f"causal={causal}: off by {err:.3g}"


def test_each_request_as_alone(backend):
    """A request's output is bit for bit its output alone, whatever rows of the buffers it holds."""
    qr, wr = [(0, 40), (3, 20), (0, 0)], [(0, 5), (0, 16), (2, 9)]
    q, K, V, kw, vw = _inputs(3, 43, 16, 2, mx.float32, 4, seed=3)
    out = fa.windowed_decode_attention(q, K, V, kw, vw, key_ranges=fa.KeyRanges(qr), window_ranges=fa.KeyRanges(wr),
                                       mask="causal", backend=backend)
    for b in range(3):
        (qs, ql), (ws, wl) = qr[b], wr[b]
        own_k = [x[b:b + 1, :, qs:qs + max(ql, 1)] for x in K]
        own_v = [x[b:b + 1, :, qs:qs + max(ql, 1)] for x in V]
        alone = fa.windowed_decode_attention(q[b:b + 1], own_k, own_v, kw[b:b + 1, :, ws:ws + max(wl, 1)],
                                             vw[b:b + 1, :, ws:ws + max(wl, 1)], key_ranges=fa.KeyRanges([(0, ql)]),
                                             window_ranges=fa.KeyRanges([(0, wl)]), mask="causal", backend=backend)
        assert mx.array_equal(out[b:b + 1], alone), f"request {b}"


def test_no_quantized_part_is_decode_attention(backend):
    q, _, _, kw, vw = _inputs(2, 1, 9, 1, mx.float32, 4, seed=5)
    out = fa.windowed_decode_attention(q, None, None, kw, vw, backend=backend)
    expected = oracle.attention(np_of(q), np_of(kw), np_of(vw), scale=D**-0.5)
    assert np.abs(np_of(out) - expected).max() <= TOLERANCE[mx.float32]


@pytest.mark.parametrize("change, error, name", [
    (dict(mask=mx.ones((1, 1, 1, 9), dtype=mx.bool_)), ValueError, "mask"),
    (dict(mask="full"), ValueError, "mask"),
    (dict(mask=3), TypeError, "mask"),
    (dict(values=None), TypeError, "values"),
    (dict(bits=3), ValueError, "bits"),
    (dict(group_size=48), ValueError, "group_size"),
    (dict(window_keys=None), TypeError, "window_keys"),
    (dict(window_values=mx.zeros((1, 2, 8, 64))), ValueError, "window_keys and window_values"),
    (dict(key_ranges=fa.KeyRanges([(0, 41)])), ValueError, "key_ranges"),
    (dict(window_ranges=fa.KeyRanges([(2, 8)])), ValueError, "window_ranges"),
    (dict(scale=float("nan")), ValueError, "scale"),
])
def test_bad_arguments_named(change, error, name):
    q, K, V, kw, vw = _inputs(1, 40, 9, 1, mx.float32, 4, seed=6)
    args = dict(queries=q, keys=K, values=V, window_keys=kw, window_values=vw)
    args.update(change)
    with pytest.raises(error, match=name):
        fa.windowed_decode_attention(**args)


def test_window_dtype_must_match_queries():
    q, K, V, kw, vw = _inputs(1, 40, 9, 1, mx.float32, 4, seed=7)
    with pytest.raises(TypeError, match="window_keys"):
        fa.windowed_decode_attention(q, K, V, kw.astype(mx.bfloat16), vw.astype(mx.bfloat16))
