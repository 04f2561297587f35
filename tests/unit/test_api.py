"""Plain pytest checks of the public API: one readable example per validation branch of
fusedattend/_problem.py, api.py and backends.py, and semantic spot checks against the oracle."""

import math

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import _problem, backends
from fusedattend.conformance import oracle

B, H_Q, H_KV, L, S, D = 2, 4, 2, 3, 10, 64


def arr(*shape, dtype=mx.float32, seed=0):
    return mx.array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).astype(dtype)


def qkv(dtype=mx.float32, layered=False):
    lead = (2,) if layered else ()
    return (arr(*lead, B, H_Q, L, D, dtype=dtype, seed=1), arr(*lead, B, H_KV, S, D, dtype=dtype, seed=2),
            arr(*lead, B, H_KV, S, D, dtype=dtype, seed=3))


def npf(x):
    return np.array(x.astype(mx.float32)).astype(np.float64)


def tol_for(expected, st, dtype="float32"):
    return oracle.parity_tolerance(expected, st, dtype, D)


def assert_oracle(out, q, k, v, dtype="float32", **kw):
    expected, st = oracle.attention(npf(q), npf(k), npf(v), stats=True, **kw)
    ratio, err = oracle.compare(npf(out), expected, tol_for(expected, st, dtype))
    assert ratio <= 1.0, f"err {err}"


Q, K, V = qkv()
QT = fa.quantize_kv(K, bits=4, group_size=64)
VT = fa.quantize_kv(V, bits=4, group_size=64)


def plain(**kw):
    args = dict(queries=Q, keys=K, values=V)
    args.update(kw)
    return lambda: fa.decode_attention(**args)


def quant(**kw):
    args = dict(queries=Q, keys=QT, values=VT, bits=4, group_size=64)
    args.update(kw)
    return lambda: fa.quantized_decode_attention(**args)


# (id, call, exception, regex the message must match)
BRANCHES = [
    # _layered_queries
    ("queries_not_array", plain(queries=np.zeros((B, H_Q, L, D), np.float32)), TypeError, "queries"),
    ("queries_int_dtype", plain(queries=Q.astype(mx.int32)), TypeError, "queries"),
    ("queries_ndim_3", plain(queries=Q[0]), ValueError, "queries"),
    ("queries_ndim_6", plain(queries=Q[None, None]), ValueError, "queries"),
    ("queries_L_zero", plain(queries=Q[..., :0, :]), ValueError, "L = 0"),
    ("queries_empty_batch", plain(queries=Q[:0], keys=K[:0], values=V[:0]), ValueError, "empty batch"),
    ("queries_empty_heads", plain(queries=Q[:, :0]), ValueError, "empty batch, head"),
    ("head_dim_not_multiple_of_8", plain(queries=arr(B, H_Q, L, 60), keys=arr(B, H_KV, S, 60),
                                         values=arr(B, H_KV, S, 60)), ValueError, r"\bD\b"),
    ("head_dim_too_big", plain(queries=arr(B, H_Q, L, 264), keys=arr(B, H_KV, S, 264),
                               values=arr(B, H_KV, S, 264)), ValueError, r"\bD\b"),
    # keys / values arrays
    ("keys_not_array", plain(keys=[[1.0]]), TypeError, "keys"),
    ("values_not_array", plain(values=None), TypeError, "values"),
    ("keys_int_dtype", plain(keys=K.astype(mx.int32)), TypeError, "keys"),
    ("keys_dtype_differs", plain(keys=K.astype(mx.float16)), TypeError, "keys"),
    ("values_dtype_differs", plain(values=V.astype(mx.bfloat16)), TypeError, "values"),
    # _layered_kv
    ("keys_ndim", plain(keys=K[0]), ValueError, "keys"),
    ("values_ndim_5_with_4d_queries", plain(values=V[None]), ValueError, "values"),
    ("keys_layers_differ", plain(queries=qkv(layered=True)[0], keys=mx.concatenate([qkv(layered=True)[1]] * 2),
                                 values=qkv(layered=True)[2]), ValueError, "keys has 4 layers"),
    ("keys_batch_differs", plain(keys=K[:1]), ValueError, "keys has batch size 1"),
    ("values_batch_differs", plain(values=V[:1]), ValueError, "values has batch size 1"),
    ("H_q_not_multiple_of_H_kv", plain(keys=arr(B, 3, S, D), values=arr(B, 3, S, D)), ValueError, "keys has H_kv=3"),
    ("H_kv_zero", plain(keys=K[:, :0], values=V[:, :0]), ValueError, "H_kv=0"),
    ("S_zero", plain(keys=K[..., :0, :], values=V[..., :0, :]), ValueError, "keys has S = 0"),
    # _check_same
    ("keys_values_H_kv_differ", plain(values=arr(B, 4, S, D)), ValueError, "keys and values disagree on H_kv"),
    ("keys_values_S_differ", plain(values=V[..., :5, :]), ValueError, "keys and values disagree on S"),
    ("keys_D_differs", plain(keys=K[..., :32]), ValueError, "keys and queries disagree on D"),
    ("values_D_differs", plain(values=V[..., :32]), ValueError, "values and queries disagree on D"),
    # _scale
    ("scale_string", plain(scale="0.1"), TypeError, "scale"),
    ("scale_bool", plain(scale=True), TypeError, "scale"),
    ("scale_array", plain(scale=mx.array(0.1)), TypeError, "scale"),
    ("scale_nan", plain(scale=math.nan), ValueError, "scale must be finite"),
    ("scale_inf", plain(scale=-math.inf), ValueError, "scale must be finite"),
    ("scale_past_float32", plain(scale=1e39), ValueError, "scale must be finite in float32"),
    ("scale_int_past_float", plain(scale=10**400), ValueError, "scale must be finite"),
    # _mask
    ("mask_other_string", plain(mask="upper"), ValueError, "mask"),
    ("mask_list", plain(mask=[[True] * S] * L), TypeError, "mask"),
    ("mask_numpy", plain(mask=np.ones((L, S), bool)), TypeError, "mask"),
    ("mask_int_dtype", plain(mask=mx.ones((L, S), dtype=mx.int32)), TypeError, "mask"),
    ("mask_0d", plain(mask=mx.array(True)), ValueError, "mask"),
    ("mask_6d", plain(mask=mx.ones((1, 1, 1, 1, L, S), dtype=mx.bool_)), ValueError, "mask"),
    ("mask_not_broadcasting", plain(mask=mx.ones((L, S + 1), dtype=mx.bool_)), ValueError, "mask"),
    ("mask_broadcasts_larger", plain(mask=mx.ones((3, B, H_Q, L, S), dtype=mx.bool_)), ValueError, "mask"),
    # _key_ranges
    ("key_ranges_list", plain(key_ranges=[[0, S]] * B), TypeError, "key_ranges"),
    ("key_ranges_float", plain(key_ranges=mx.zeros((B, 2))), TypeError, "key_ranges"),
    ("key_ranges_shape", plain(key_ranges=mx.zeros((B,), dtype=mx.int32)), ValueError, "key_ranges"),
    ("key_ranges_rows", plain(key_ranges=mx.zeros((B + 1, 2), dtype=mx.int32)), ValueError, "key_ranges"),
    ("key_ranges_negative_start", plain(key_ranges=mx.array([[0, S], [-1, 2]])), ValueError, "key_ranges"),
    ("key_ranges_negative_length", plain(key_ranges=mx.array([[0, -1], [0, 2]])), ValueError, "key_ranges"),
    ("key_ranges_past_end", plain(key_ranges=mx.array([[0, S], [3, S - 2]])), ValueError, "key_ranges"),
    # start + length wraps around in int64 to below S; each alone is far past it
    ("key_ranges_sum_wraps", plain(key_ranges=mx.array([[0, S], [2**62, 2**62]], dtype=mx.int64)), ValueError, "key_ranges"),
    # check_bits
    ("bits_float", quant(bits=4.0), TypeError, "bits"),
    ("bits_bool", quant(bits=True), TypeError, "bits"),
    ("group_size_str", quant(group_size="64"), TypeError, "group_size"),
    ("bits_3_refused", quant(bits=3), ValueError, "bits=3"),
    ("bits_5_refused", quant(bits=5), ValueError, "bits=5"),
    ("bits_6_refused", quant(bits=6), ValueError, "bits=6"),
    ("bits_1", quant(bits=1), ValueError, "bits"),
    ("bits_7", quant(bits=7), ValueError, "bits"),
    ("bits_16", quant(bits=16), ValueError, "bits"),
    ("group_size_16", quant(group_size=16), ValueError, "group_size"),
    ("group_size_256", quant(group_size=256), ValueError, "group_size"),
    # _quantized_triple
    ("keys_not_triple", quant(keys=K), TypeError, "keys"),
    ("values_pair", quant(values=VT[:2]), TypeError, "values"),
    ("keys_scales_not_array", quant(keys=(QT[0], np.array(QT[1]), QT[2])), TypeError, "keys.scales"),
    ("keys_codes_not_uint32", quant(keys=(QT[0].astype(mx.int32), QT[1], QT[2])), TypeError, "keys.codes"),
    ("values_scales_int", quant(values=(VT[0], VT[1].astype(mx.int32), VT[2])), TypeError, "values.scales"),
    ("values_biases_int", quant(values=(VT[0], VT[1], VT[2].astype(mx.int32))), TypeError, "values.biases"),
    ("keys_codes_ndim", quant(keys=(QT[0][0], QT[1], QT[2])), ValueError, "keys.codes"),
    ("values_codes_batch", quant(values=tuple(a[:1] for a in VT)), ValueError, "values.codes"),
    ("group_size_not_dividing_D",
     lambda: fa.quantized_decode_attention(arr(B, H_Q, L, 96), fa.quantize_kv(arr(B, H_KV, S, 96), bits=4, group_size=32),
                                           fa.quantize_kv(arr(B, H_KV, S, 96), bits=4, group_size=32), bits=4, group_size=64),
     ValueError, "group_size=64 does not divide"),
    ("triple_axes_disagree", quant(keys=(QT[0], QT[1], mx.concatenate([QT[2], QT[2]], axis=-1))), ValueError,
     "keys: codes"),
    ("codes_for_other_bits", quant(bits=8), ValueError, "keys: with D=64, bits=8"),
    ("scales_for_other_group_size", quant(group_size=32), ValueError, "keys: with D=64"),
    ("quantized_H_kv_differ", quant(values=fa.quantize_kv(arr(B, 4, S, D), bits=4, group_size=64)), ValueError,
     "keys and values disagree on H_kv"),
    ("quantized_S_differ", quant(values=tuple(a[..., :4, :] for a in VT)), ValueError,
     "keys and values disagree on S"),
    # quantize_kv
    ("quantize_kv_bits", lambda: fa.quantize_kv(K, bits=5), ValueError, "bits"),
    ("quantize_kv_not_array", lambda: fa.quantize_kv(np.array(K)), TypeError, r"\bx\b"),
    ("quantize_kv_int", lambda: fa.quantize_kv(K.astype(mx.int8)), TypeError, r"\bx\b"),
    ("quantize_kv_1d", lambda: fa.quantize_kv(K.reshape(-1)), ValueError, r"\bx\b"),
    ("quantize_kv_indivisible", lambda: fa.quantize_kv(arr(4, 96), group_size=64), ValueError, "group_size"),
    ("quantize_kv_empty", lambda: fa.quantize_kv(arr(4, 0)), ValueError, r"\bx\b"),
    # dequantize_kv
    ("dequantize_kv_bits", lambda: fa.dequantize_kv(*QT, bits=6, group_size=64), ValueError, "bits"),
    ("dequantize_kv_not_array", lambda: fa.dequantize_kv(QT[0], QT[1], None, bits=4, group_size=64), TypeError,
     "biases"),
    ("dequantize_kv_codes_dtype", lambda: fa.dequantize_kv(QT[0].astype(mx.int32), QT[1], QT[2], bits=4,
                                                           group_size=64), TypeError, "codes"),
    ("dequantize_kv_scales_biases", lambda: fa.dequantize_kv(QT[0], QT[1], QT[2][:1], bits=4, group_size=64),
     ValueError, "scales .* and biases"),
    ("dequantize_kv_lead_axes", lambda: fa.dequantize_kv(QT[0][:1], QT[1], QT[2], bits=4, group_size=64), ValueError,
     "codes .* and scales"),
    ("dequantize_kv_1d_codes", lambda: fa.dequantize_kv(QT[0][0, 0, 0], QT[1][0, 0, 0], QT[2][0, 0, 0], bits=4,
                                                        group_size=64), ValueError, "codes"),
    ("dequantize_kv_last_axis", lambda: fa.dequantize_kv(*QT, bits=8, group_size=64), ValueError, "bits=8"),
    ("dequantize_kv_scales_dtype", lambda: fa.dequantize_kv(QT[0], QT[1].astype(mx.int32), QT[2], bits=4,
                                                            group_size=64), TypeError, "scales"),
    ("dequantize_kv_empty", lambda: fa.dequantize_kv(QT[0][:0], QT[1][:0], QT[2][:0], bits=4, group_size=64),
     ValueError, "codes"),
    # backends
    ("backend_unknown", plain(backend="tpu"), ValueError, "backend='tpu' is not a backend"),
    ("backend_not_str", plain(backend=1), TypeError, "backend"),
]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "after_valid_calls"])
@pytest.mark.parametrize("call, exc, pattern", [b[1:] for b in BRANCHES], ids=[b[0] for b in BRANCHES])
def test_validation_branch(call, exc, pattern, warm, monkeypatch):
    """Every bad call raises, also once valid calls of the same arrays have had their checks
    skipped on repeat (fusedattend._problem._CHECKED; on a GPU, backends' replays). Both start
    empty: on a GPU machine an earlier test's replays would skip the valid calls' checks, and
    _CHECKED stay empty (77 of these failed with --backend cuda on the H200 until 2026-12-01)."""
    monkeypatch.setattr(_problem, "_CHECKED", set())
    monkeypatch.setattr(backends, "_REPLAYS", {})
    if warm:
        for valid in (plain(), plain(mask="causal"), plain(scale=0.5), quant(), quant(mask="causal")):
            valid()
            valid()
        assert _problem._CHECKED
    with pytest.raises(exc, match=pattern):
        call()


def test_unavailable_backend_name():
    missing = [n for n in fa.BACKENDS if n not in fa.available_backends()]
    if not missing:
        pytest.skip("every backend is available on this machine")
    with pytest.raises(ValueError, match="not available here"):
        fa.decode_attention(Q, K, V, backend=missing[0])


def test_available_backends():
    names = fa.available_backends()
    assert names[0] == "reference" and "reference" in names
    assert set(names) <= set(fa.BACKENDS)
    assert fa.default_backend() in names


def test_env_override(monkeypatch, backend):
    monkeypatch.setenv("FUSEDATTEND_BACKEND", backend)
    assert fa.default_backend() == backend
    out = fa.decode_attention(Q, K, V)
    assert mx.array_equal(out, fa.decode_attention(Q, K, V, backend=backend))


def test_env_override_unknown_name(monkeypatch):
    monkeypatch.setenv("FUSEDATTEND_BACKEND", "nope")
    with pytest.raises(ValueError, match="FUSEDATTEND_BACKEND"):
        fa.decode_attention(Q, K, V)
    monkeypatch.setenv("FUSEDATTEND_BACKEND", "")
    fa.decode_attention(Q, K, V)  # empty means unset


# ---------------------------------------------------------------------------------- semantics


def test_causal_alignment_lower_right(backend):
    # L = 3 rows over S = 10 keys: row i sees keys 0 .. 7 + i
    out = fa.decode_attention(Q, K, V, mask="causal", backend=backend)
    rows = [fa.decode_attention(Q[:, :, i:i + 1], K[:, :, :8 + i], V[:, :, :8 + i], backend=backend) for i in range(L)]
    assert_oracle(out, Q, K, V, mask="causal")
    for i in range(L):
        e, st = oracle.attention(npf(Q[:, :, i:i + 1]), npf(K[:, :, :8 + i]), npf(V[:, :, :8 + i]), stats=True)
        assert oracle.compare(npf(out[:, :, i:i + 1]), e, 2 * tol_for(e, st))[0] <= 1
        assert oracle.compare(npf(rows[i]), e, tol_for(e, st))[0] <= 1


def test_causal_with_key_ranges_aligns_to_range_end(backend):
    kr = mx.array([[2, 5], [0, 10]])
    out = fa.decode_attention(Q, K, V, mask="causal", key_ranges=kr, backend=backend)
    # request 0: keys 2..6, last row sees up to 6, row 0 up to 4
    for i in range(L):
        e, st = oracle.attention(npf(Q[:1, :, i:i + 1]), npf(K[:1, :, 2:5 + i]), npf(V[:1, :, 2:5 + i]), stats=True)
        assert oracle.compare(npf(out[:1, :, i:i + 1]), e, 2 * tol_for(e, st))[0] <= 1


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64])
def test_key_ranges_views_read_as_their_values(backend, dtype):
    """A strided key_ranges (a column slice of a wider array) gives what its contiguous copy gives,
    on the first call and on its repeat (a replay on a GPU): the kernels read (B, 2) row-major."""
    view = mx.array([[2, 99, 5, 99], [0, 99, 10, 99]], dtype=dtype)[:, ::2]
    copy = mx.array(np.array(view))
    for _ in range(2):
        got = fa.decode_attention(Q, K, V, key_ranges=view, backend=backend)
        assert mx.array_equal(got, fa.decode_attention(Q, K, V, key_ranges=copy, backend=backend)).item()
        got = fa.quantized_decode_attention(Q, QT, VT, group_size=64, key_ranges=view, backend=backend)
        want = fa.quantized_decode_attention(Q, QT, VT, group_size=64, key_ranges=copy, backend=backend)
        assert mx.array_equal(got, want).item()


def test_gqa_mapping_h_div_group(backend):
    # H_q = 4, H_kv = 2: heads 0,1 read kv head 0; heads 2,3 read kv head 1
    out = fa.decode_attention(Q, K, V, backend=backend)
    for h in range(H_Q):
        one = fa.decode_attention(Q[:, h:h + 1], K[:, h // 2:h // 2 + 1], V[:, h // 2:h // 2 + 1], backend=backend)
        e, st = oracle.attention(npf(Q[:, h:h + 1]), npf(K[:, h // 2:h // 2 + 1]), npf(V[:, h // 2:h // 2 + 1]),
                                 stats=True)
        assert oracle.compare(npf(out[:, h:h + 1]), e, tol_for(e, st))[0] <= 1
        assert oracle.compare(npf(one), e, tol_for(e, st))[0] <= 1
    # and not h % H_kv: head 1 must differ from what kv head 1 would give
    wrong = fa.decode_attention(Q[:, 1:2], K[:, 1:2], V[:, 1:2], backend=backend)
    assert not np.allclose(npf(out[:, 1:2]), npf(wrong), atol=1e-3)


def test_fully_masked_row_is_zeros(backend):
    mask = np.ones((B, H_Q, L, S), bool)
    mask[1, 2, 0] = False
    out = fa.decode_attention(Q, K, V, mask=mx.array(mask), backend=backend)
    assert np.all(npf(out[1, 2, 0]) == 0)
    assert_oracle(out, Q, K, V, mask=mask)
    add = np.where(mask, 0.0, -np.inf).astype(np.float32)
    out2 = fa.decode_attention(Q, K, V, mask=mx.array(add), backend=backend)
    assert np.all(npf(out2[1, 2, 0]) == 0)
    out3 = fa.decode_attention(Q, K, V, key_ranges=mx.array([[0, S], [4, 0]]), backend=backend)
    assert np.all(npf(out3[1]) == 0)


def test_4d_and_5d_forms(backend):
    q5, k5, v5 = qkv(layered=True)
    out5 = fa.decode_attention(q5, k5, v5, mask="causal", backend=backend)
    assert out5.shape == q5.shape
    for layer in range(2):
        assert mx.array_equal(out5[layer], fa.decode_attention(q5[layer], k5[layer], v5[layer], mask="causal",
                                                               backend=backend))
    assert_oracle(out5, q5, k5, v5, mask="causal")


def test_scale_default_is_inverse_sqrt_D(backend):
    a = fa.decode_attention(Q, K, V, backend=backend)
    b = fa.decode_attention(Q, K, V, scale=1 / math.sqrt(D), backend=backend)
    assert mx.array_equal(a, b)
    c = fa.decode_attention(Q, K, V, scale=1.0, backend=backend)
    assert not mx.array_equal(a, c)
    assert_oracle(c, Q, K, V, scale=1.0)
    assert_oracle(fa.decode_attention(Q, K, V, scale=2, backend=backend), Q, K, V, scale=2.0)  # int accepted


@pytest.mark.parametrize("scale", [np.float32(0.25), np.float16(0.25), np.int64(2)], ids=lambda s: type(s).__name__)
def test_numpy_scalar_scale_is_its_value(scale, backend):
    """A numpy scalar scale, as mx.fast.scaled_dot_product_attention takes it: the same bits as
    the Python float of its value, replayed or not."""
    want = fa.decode_attention(Q, K, V, scale=float(scale), backend=backend)
    for _ in range(2):  # the second call replays the first's launches
        assert mx.array_equal(fa.decode_attention(Q, K, V, scale=scale, backend=backend), want)
    kq, vq = fa.quantize_kv(K.astype(mx.float32)), fa.quantize_kv(V.astype(mx.float32))
    assert mx.array_equal(fa.quantized_decode_attention(Q, kq, vq, scale=scale, backend=backend),
                          fa.quantized_decode_attention(Q, kq, vq, scale=float(scale), backend=backend))


@pytest.mark.parametrize("scale", [mx.array(0.5), np.bool_(True), np.array([0.5]), 1j], ids=str)
def test_scale_that_is_not_a_real_number_is_refused(scale, backend):
    with pytest.raises(TypeError, match="scale must be a float or None"):
        fa.decode_attention(Q, K, V, scale=scale, backend=backend)


def test_non_contiguous_kv(backend):
    buf_k = arr(B, H_KV, 256, D, seed=7)
    buf_v = arr(B, H_KV, 256, D, seed=8)
    k, v = buf_k[..., :S, :], buf_v[..., :S, :]
    out = fa.decode_attention(Q, k, v, mask="causal", backend=backend)
    ref = fa.decode_attention(Q, mx.array(np.array(k)), mx.array(np.array(v)), mask="causal", backend=backend)
    assert mx.array_equal(out, ref)
    assert_oracle(out, Q, k, v, mask="causal")


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16], ids=str)
def test_output_dtype_and_shape(dtype, backend):
    q, k, v = qkv(dtype)
    out = fa.decode_attention(q, k, v, mask=mx.zeros((L, S), dtype=mx.float32), backend=backend)
    assert out.dtype == dtype and out.shape == q.shape
    name = {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}[dtype]
    assert_oracle(out, q, k, v, dtype=name)
    kq, vq = fa.quantize_kv(k, bits=8, group_size=32), fa.quantize_kv(v, bits=8, group_size=32)
    outq = fa.quantized_decode_attention(q, kq, vq, bits=8, group_size=32, backend=backend)
    assert outq.dtype == dtype and outq.shape == q.shape


def test_long_query_goes_to_reference_and_is_right(backend):
    q = arr(1, 2, 12, D, seed=4)
    out = fa.decode_attention(q, K[:1], V[:1], mask="causal", backend=backend)
    assert_oracle(out, q, K[:1], V[:1], mask="causal")
    # rows 0 and 1 see no key (S - L + i < 0): zeros
    assert np.all(npf(out[:, :, :2]) == 0)


def test_quantized_spot_check(backend):
    out = fa.quantized_decode_attention(Q, QT, VT, bits=4, group_size=64, mask="causal", backend=backend)
    kd = oracle.dequantize(np.array(QT[0]), npf(QT[1]), npf(QT[2]), bits=4, group_size=64)
    vd = oracle.dequantize(np.array(VT[0]), npf(VT[1]), npf(VT[2]), bits=4, group_size=64)
    e, st = oracle.attention(npf(Q), kd, vd, mask="causal", stats=True)
    assert oracle.compare(npf(out), e, tol_for(e, st))[0] <= 1
    # quantize_kv is mx.quantize; dequantize_kv is mx.dequantize
    assert all(mx.array_equal(a, b) for a, b in zip(QT, mx.quantize(K, group_size=64, bits=4)))
    assert isinstance(QT, fa.QuantizedKV)
    assert mx.array_equal(fa.dequantize_kv(*QT, bits=4, group_size=64), mx.dequantize(*QT, group_size=64, bits=4))
