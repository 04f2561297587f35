"""An independent float64 numpy oracle of fusedattend's semantics, and the tolerances against it.

Shares no code with the package: numpy only, numpy arrays in and out. Callers convert MLX arrays
with `np.array(x.astype(mx.float32))` (exact for f16/bf16/f32), so the oracle sees exactly the
rounded inputs the kernels see; its only error is float64 arithmetic (negligible here).

Semantics (fusedattend/reference.py's docstring), per layer l, request b, query head h, row i:
    G = H_q // H_kv, kv head = h // G
    S_end = S, or start + length when key_ranges gives request b the range (start, length)
    visible(j) = (no key_ranges or start <= j < start + length)
                 and mask lets i see j:  None: always; "causal": j <= S_end - L + i;
                 bool: mask[..., i, j]; additive: mask[..., i, j] != -inf
    s_j   = scale * q_i . k_j (+ additive mask value);  scale defaults to 1 / sqrt(D)
    out_i = sum_{visible j} softmax_{visible}(s)_j * v_j, or zeros when no key is visible
Hidden keys never enter: NaN or Inf there (in K or V) cannot reach the rows that do not see them,
and a value whose weight is 0 (its score underflows) is skipped.
"""

from __future__ import annotations

import math

import numpy as np

# unit roundoff (half an ulp at 1.0) of each output dtype, by name
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
EPS32 = 2.0**-23  # float32 machine epsilon (ulp at 1.0)


def _five(x, name):
    x = np.asarray(x)
    if x.ndim == 4:
        return x[None], False
    if x.ndim == 5:
        return x, True
    raise ValueError(f"oracle: {name} must be 4-D or 5-D, got {x.shape}")


def visibility(q_shape, S, mask=None, key_ranges=None):
    """Boolean (NL, B, H_q, L, S): which key each query row sees. q_shape is 4-D or 5-D."""
    if len(q_shape) == 4:
        q_shape = (1,) + tuple(q_shape)
    NL, B, H_q, L, _ = q_shape
    j = np.arange(S)
    vis = np.ones((NL, B, H_q, L, S), dtype=bool)
    if key_ranges is not None:
        kr = np.asarray(key_ranges).astype(np.int64)
        start = kr[:, 0][None, :, None, None, None]
        end = start + kr[:, 1][None, :, None, None, None]
        vis &= (j >= start) & (j < end)
    else:
        end = np.full((1, B, 1, 1, 1), S)
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(mask)
        i = np.arange(L)[:, None]
        vis &= j <= (end - L + i)
    elif mask is not None:
        m = np.asarray(mask)
        m = m.reshape((1,) * (5 - m.ndim) + m.shape)
        if m.dtype == bool:
            vis &= m
        else:
            vis &= m.astype(np.float64) != -np.inf  # NaN, +inf: the row is NaN
    return vis


def _visible_heads(q5, k5, v5, mask, key_ranges):
    """(visibility (NL,B,H_q,L,S), K and V per query head): query head h reads kv head h // G.
    Garbage in hidden keys must not reach anything: K/V rows no row of a head sees are zeroed
    (their scores are replaced with -inf after the product in _scored)."""
    H_q, H_kv, S = q5.shape[2], k5.shape[2], k5.shape[3]
    heads = np.arange(H_q) // (H_q // H_kv)
    vis = visibility(q5.shape, S, mask, key_ranges)
    key_seen = vis.any(axis=-2)[..., None]  # (NL,B,H_q,S,1): keys some row of this head sees
    kh = np.where(key_seen, k5[:, :, heads], 0.0)
    vh = None if v5 is None else np.where(key_seen, v5[:, :, heads], 0.0)
    return vis, kh, vh


def _scored(q5, kh, vis, scale, mask, magnitudes=True):
    """(scores, -inf where hidden; their magnitude bound scale * |q| |k| + |mask|, or None
    without `magnitudes`; weights exp(s - row max), 0 where hidden), float64, (NL,B,H_q,L,S)."""
    with np.errstate(invalid="ignore", over="ignore"):  # garbage and huge inputs are the point
        s = scale * (q5 @ kh.swapaxes(-1, -2))
        mag = abs(scale) * (np.abs(q5) @ np.abs(kh).swapaxes(-1, -2)) if magnitudes else None
        if mask is not None and not isinstance(mask, str):
            m = np.asarray(mask)
            if m.dtype != bool:
                m = m.astype(np.float64).reshape((1,) * (5 - m.ndim) + m.shape)
                madd = np.where(vis, m, 0.0)
                s = s + madd
                if magnitudes:
                    mag = mag + np.abs(madd)
        s = np.where(vis, s, -np.inf)
        rowmax = np.where(vis.any(axis=-1, keepdims=True), s.max(axis=-1, keepdims=True), 0.0)
        w = np.where(vis, np.exp(s - rowmax), 0.0)
    return s, mag, w


def weights(q, k, *, scale=None, mask=None, key_ranges=None):
    """float64 softmax weights before normalisation, exp(s - row max), as `attention` weighs:
    (NL, B, H_q, L, S), NL = 1 for 4-D queries; 0 where a row does not see the key."""
    q5, _ = _five(q, "queries")
    k5, _ = _five(k, "keys")
    q5, k5 = q5.astype(np.float64), k5.astype(np.float64)
    scale = 1.0 / math.sqrt(q5.shape[-1]) if scale is None else float(scale)
    vis, kh, _ = _visible_heads(q5, k5, None, mask, key_ranges)
    return _scored(q5, kh, vis, scale, mask, magnitudes=False)[2]


def attention(q, k, v, *, scale=None, mask=None, key_ranges=None, stats=False):
    """float64 attention. q: (B,H_q,L,D) or (NL,B,H_q,L,D); k, v: (…, H_kv, S, D).

    With stats=True also returns a dict of per-row quantities the tolerances need:
      amax (NL,B,H_q,L,1): max over visible j of |s_j| and of scale*sum_d |q_d k_jd| (+|mask|)
      vmax (NL,B,H_q,L,1): max |v_jd| over visible j
      nvis (NL,B,H_q,L,1): number of visible keys
    """
    q5, layered = _five(q, "queries")
    k5, _ = _five(k, "keys")
    v5, _ = _five(v, "values")
    q5 = q5.astype(np.float64)
    k5 = k5.astype(np.float64)
    v5 = v5.astype(np.float64)
    scale = 1.0 / math.sqrt(q5.shape[-1]) if scale is None else float(scale)
    vis, kh, vh = _visible_heads(q5, k5, v5, mask, key_ranges)
    any_vis = vis.any(axis=-1, keepdims=True)  # rows that see a key
    s, mag, w = _scored(q5, kh, vis, scale, mask)
    denom = w.sum(axis=-1, keepdims=True)
    # a row sees only its own visible keys even when another row of the head sees more, and
    # takes no term from a key it weighs 0: sum over the terms of non-zero weight, spelled out
    # where a value is not finite (0 * NaN is NaN in a product)
    if np.isfinite(vh).all():
        out = w @ vh
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            terms = w[..., :, :, None] * vh[..., None, :, :]  # (NL,B,H_q,L,S,D)
        out = np.where(w[..., None] != 0, terms, 0.0).sum(axis=-2)
    out = np.where(any_vis, out / np.where(any_vis, denom, 1.0), 0.0)
    if not layered:
        out = out[0]
    if not stats:
        return out
    amax = np.where(vis, np.maximum(np.abs(s), mag), 0.0).max(axis=-1, keepdims=True)
    vabs = np.abs(vh).max(axis=-1)  # (NL,B,H_q,S)
    vmax = np.where(vis, vabs[:, :, :, None, :], 0.0).max(axis=-1, keepdims=True)
    nvis = vis.sum(axis=-1, keepdims=True)
    st = {"amax": amax, "vmax": vmax, "nvis": nvis}
    if not layered:
        st = {key: val[0] for key, val in st.items()}
    return out, st


def unpack_codes(codes, bits, D):
    """uint32 words -> integer codes (…, D); mx.quantize packs 32//bits codes per word, LSB first."""
    codes = np.asarray(codes).astype(np.uint64)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint64) * bits)
    vals = (codes[..., None] >> shifts) & np.uint64((1 << bits) - 1)
    return vals.reshape(codes.shape[:-1] + (codes.shape[-1] * per,))[..., :D].astype(np.float64)


def dequantize(codes, scales, biases, *, bits, group_size):
    """float64 affine dequantization: w = scale * code + bias, one (scale, bias) per group."""
    scales = np.asarray(scales).astype(np.float64)
    biases = np.asarray(biases).astype(np.float64)
    D = scales.shape[-1] * group_size
    q = unpack_codes(codes, bits, D)
    s = np.repeat(scales, group_size, axis=-1)
    b = np.repeat(biases, group_size, axis=-1)
    return s * q + b


# ----------------------------------------------------------------------------------------------
# Tolerances (derivation in docs/testing.md and tests/property/test_online_softmax_parity.py)


def parity_tolerance(out, st, dtype_name, D, slack=4.0):
    """Elementwise bound on |kernel - oracle| for a kernel that accumulates in float32.

    With u32 = 2^-24, A = max visible |score| (or scale*sum|q||k|, + |additive mask|), N = number
    of visible keys, V = max visible |v|:
      scores: a length-D float32 dot product plus scaling and mask addition: |ds| <= (D+3) u32 A
      weights exp(s - max): relative error <= 2|ds| + a few u32 (exp, subtraction)
      numerator/denominator sums of N terms: relative error <= N u32 each
      => |y - o| <= V * (2 (D+3) A + 2N + 8) u32            (float32 result y)
      then rounding y to the output dtype: <= u_dtype (|o| + |y - o|).
    `slack` multiplies the float32 part, for kernels with a fast exp / different blocking.
    """
    u = UNIT_ROUNDOFF[dtype_name]
    u32 = UNIT_ROUNDOFF["float32"]
    f32 = slack * st["vmax"] * (2.0 * (D + 3) * st["amax"] + 2.0 * st["nvis"] + 8.0) * u32
    return f32 + u * (np.abs(out) + f32) + 1e-30


def low_precision_tolerance(out, st, dtype_name, D, slack=2.0):
    """Bound for an implementation that rounds scores, weights and output to the dtype
    (MLX's unfused CPU SDPA fallback, mlx_lm's quantized SDPA): with u = u_dtype,
      scores rounded: |ds| <= u A (+ the float32 part);  weights rounded: u relative
      => |y - o| <= V (2 u A + 2 u + 2 N u32 ...) + u |o|  (see parity_tolerance for the rest).
    """
    u = UNIT_ROUNDOFF[dtype_name]
    base = parity_tolerance(out, st, dtype_name, D)
    return base + slack * st["vmax"] * (2.0 * u * st["amax"] + 3.0 * u)


def compare(actual, expected, tol):
    """(max err/tol ratio, max abs err). NaN anywhere in actual gives ratio inf."""
    actual = np.asarray(actual, dtype=np.float64)
    err = np.abs(actual - expected)
    if np.isnan(err).any():
        return float("inf"), float("inf")
    tol = np.broadcast_to(tol, err.shape)
    return float((err / tol).max()), float(err.max())
