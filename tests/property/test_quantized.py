"""Quantized K/V.

* quantize_kv returns exactly mx.quantize's (codes, scales, biases), bit for bit, and
  dequantize_kv equals mx.dequantize on them bit for bit (the affine format round-trips).
* quantize_kv -> dequantize_kv error per element <= half a quantization step plus the float
  rounding of the stored scales/biases (oracle-free derivation):
      x_hat = s~ * c + b~ computed in the scales' dtype, s~ = s(1+d1), b~ = b(1+d2), |di| <= u
      |x_hat - x| <= s/2 (rounding x to its code)  +  u (c |s| + |b|)  (scale/bias rounding)
                     + u |x_hat| (the product/sum rounded to the dtype) + u |x| (bias/min slack)
  with c <= 2^bits - 1 and u = the dtype's unit roundoff; MLX may also nudge the scale so that
  the group's min (or max) lands on a code, which stays within this bound (checked).
* fused quantized_decode_attention == dequantize_kv then decode_attention, within tolerance:
  dequantize_kv rounds K and V to the dtype (relative error u_dtype per element) whereas the
  fused kernel may keep the dequantized values in float32. Propagated: scores move by at most
  u A (A = max row score magnitude, as in the parity bound), weights by 2 u A relative, and
  the V rounding adds u V. Tolerance = 2 x parity bound + V (2 u A + u) (2x for slack).
  (The tight comparison, against the float64 oracle on the same codes, is in
  test_online_softmax_parity.py.)
"""

import mlx.core as mx
import numpy as np
from hypothesis import given, target

import fusedattend as fa
from fusedattend.conformance import oracle
from tests.property.strategies import (
    examples,
    oracle_of,
    quantizable_arrays,
    quantized_cases,
    run_case,
    to_np,
)


@examples(3)
@given(xbg=quantizable_arrays())
def test_quantize_kv_is_mx_quantize_bit_for_bit(xbg):
    x, bits, gs = xbg
    got = fa.quantize_kv(x, bits=bits, group_size=gs)
    want = mx.quantize(x, group_size=gs, bits=bits)
    assert len(got) == 3
    for g, w, name in zip(got, want, ("codes", "scales", "biases")):
        assert g.dtype == w.dtype and mx.array_equal(g, w), name
    back = fa.dequantize_kv(*got, bits=bits, group_size=gs)
    assert back.dtype == x.dtype
    assert mx.array_equal(back, mx.dequantize(*want, group_size=gs, bits=bits))


@examples(3)
@given(xbg=quantizable_arrays())
def test_round_trip_error_within_half_step(xbg):
    """Half a step for every element inside the group's representable range
    [b, b + (2^bits - 1) s]; MLX nudges the scale so that the group's larger-magnitude end is
    exactly a code (so 0 stays exact), which may leave the other end up to
    n/(n-1) steps outside the range (n = 2^bits - 1): those clipped elements get that bound.
    Plus, everywhere, float rounding u (c |s| + |b| + |x_hat| + |x|)."""
    x, bits, gs = xbg
    codes, scales, biases = fa.quantize_kv(x, bits=bits, group_size=gs)
    back = to_np(fa.dequantize_kv(codes, scales, biases, bits=bits, group_size=gs)).astype(np.float64)
    xs = to_np(x).astype(np.float64)
    s = np.repeat(to_np(scales).astype(np.float64), gs, axis=-1)
    b = np.repeat(to_np(biases).astype(np.float64), gs, axis=-1)
    u = oracle.UNIT_ROUNDOFF[{mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}[x.dtype]]
    n = 2**bits - 1
    rounding = u * (n * np.abs(s) + np.abs(b) + np.abs(back) + np.abs(xs)) + 1e-30
    lo, hi = np.minimum(b, b + n * s), np.maximum(b, b + n * s)
    inside = (xs >= lo - rounding) & (xs <= hi + rounding)
    bound = np.where(inside, np.abs(s) / 2, np.abs(s) * n / (n - 1)) + rounding
    err = np.abs(back - xs)
    target(float((err / bound).max()))
    assert np.all(err <= bound), (
        f"round-trip error {err.max():.3g} > bound at bits={bits} gs={gs} "
        f"(worst {float((err / bound).max()):.3g}x, inside={bool(inside.flat[np.argmax(err / bound)])})"
    )
    # the codes really are the packed integers (the oracle's own unpacker) and reproduce dequantize_kv
    deq64 = oracle.dequantize(np.array(codes), to_np(scales), to_np(biases), bits=bits, group_size=gs)
    assert np.all(np.abs(deq64 - back) <= 2 * rounding)


@examples(3)
@given(case=quantized_cases())
def test_fused_equals_dequantize_then_decode(case, backend):
    fused = run_case(case, backend)
    kd = fa.dequantize_kv(*case.k, bits=case.bits, group_size=case.group_size)
    vd = fa.dequantize_kv(*case.v, bits=case.bits, group_size=case.group_size)
    assert kd.dtype == case.dtype
    unfused = fa.decode_attention(case.q, kd, vd, scale=case.scale, mask=case.mask,
                                  key_ranges=case.key_ranges, backend=backend)
    expected, stats = oracle_of(case)
    u = oracle.UNIT_ROUNDOFF[case.dtype_name]
    tol = 2 * oracle.parity_tolerance(expected, stats, case.dtype_name, case.dims[-1]) + 2 * stats["vmax"] * (
        2 * u * stats["amax"] + u
    )
    ratio, err = oracle.compare(to_np(fused), to_np(unfused).astype(np.float64), tol)
    target(min(ratio, 1e6))
    assert ratio <= 1.0, f"fused vs dequantize+decode: err {err:.3g} = {ratio:.3g}x tol: {case}"
