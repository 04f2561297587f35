"""Mask semantics.

* "causal" equals the explicit lower-right-aligned boolean mask (j <= S_end - L + i, S_end = S
  or the key range's end). Within the parity tolerance, not bit for bit: a kernel may size its
  split over S from the causal bound, which legitimately changes the float32 summation order.
* A boolean mask equals the additive mask 0 / -inf with the same pattern, BIT FOR BIT. Argument:
  adding +0.0 to a float32 score is exact (s + 0 == s, and -0 + 0 = +0 changes no exp), and both
  kinds hide the same keys, so every float32 operation sees identical operands in the same
  order. A kernel that reaches a different bit pattern runs different arithmetic per mask kind,
  which this property rejects on purpose.
* A row that sees no key gives exact zeros (not the mean of V as MLX's SDPA, not NaN).
* Keys hidden from every query row of their kv head (by the mask, by causality or by
  key_ranges) may hold NaN, Inf or 1e30 garbage in K and in V: the output is bit-identical to
  the call with clean values there.
* NaN that reaches a visible score (from K, K's scales, or a NaN / +inf additive mask entry)
  makes exactly the rows that see it NaN, and NaN in a visible value its column of them: never
  zeros, which would pass for a row that sees no key. Nothing else changes by a bit.
"""

import mlx.core as mx
import numpy as np
from hypothesis import assume, given, target
from hypothesis import strategies as st

from fusedattend.conformance import oracle
from tests.property.strategies import (
    examples,
    attention_cases,
    oracle_of,
    quantized_cases,
    run_case,
    to_mx,
    to_np,
)


def _explicit_visibility(case):
    """(B,H_q,L,S) or (NL,B,H_q,L,S) boolean array of the case's visibility (mask+ranges)."""
    vis = oracle.visibility(tuple(case.dims[:3]) + (case.dims[4], case.dims[6]), case.dims[5], case.np_mask(), case.np_key_ranges())
    return _unfive(vis, case.layered)


@examples(4)
@given(case=attention_cases(mask_kinds=("causal",)))
def test_causal_equals_explicit_lower_right_bool(case, backend):
    NL, B, H_q, H_kv, L, S, D = case.dims
    if case.key_ranges is None:
        i = np.arange(L)[:, None]
        j = np.arange(S)[None, :]
        explicit = mx.array(j <= S - L + i)  # (L, S), independent of the oracle
    else:
        kr = case.np_key_ranges()
        end = (kr[:, 0] + kr[:, 1])[:, None, None, None]
        explicit = mx.array(np.arange(S) <= end - L + np.arange(L)[:, None])  # (B,1,L,S)
    a = run_case(case, backend)
    b = run_case(case, backend, mask=explicit)
    expected, stats = oracle_of(case)
    tol = 2 * oracle.parity_tolerance(expected, stats, case.dtype_name, D)
    ratio, err = oracle.compare(to_np(a), to_np(b).astype(np.float64), tol)
    target(min(ratio, 1e6))
    assert ratio <= 1.0, f"causal vs explicit mask differ by {err:.3g}: {case}"


@examples(4)
@given(case=attention_cases(mask_kinds=("bool",)))
def test_bool_equals_additive_zero_neg_inf(case, backend):
    vis = np.array(case.mask)
    for adt in {case.dtype, mx.float32}:
        additive = to_mx(np.where(vis, 0.0, -np.inf), adt)
        a = run_case(case, backend)
        b = run_case(case, backend, mask=additive)
        assert mx.array_equal(a, b), f"bool vs additive({adt}) mask differ: {case}"


@examples(4)
@given(case=attention_cases(mask_kinds=("bool", "additive", "causal")), which=st.integers(0, 2**31))
def test_fully_masked_rows_are_exact_zeros(case, backend, which):
    NL, B, H_q, H_kv, L, S, D = case.dims
    vis = _explicit_visibility(case).copy()
    # hide one more (layer, request, head, row) entirely, on top of what the case hides
    flat = vis.reshape(-1, L, S)
    flat[which % flat.shape[0], which % L, :] = False
    if case.mask_kind == "additive":
        add = to_np(case.mask)
        add = np.broadcast_to(add.reshape((1,) * (vis.ndim - add.ndim) + add.shape), vis.shape)
        mask = to_mx(np.where(vis, add, -np.inf), case.mask.dtype)
    else:
        mask = mx.array(vis)
    out = to_np(run_case(case, backend, mask=mask))
    hidden_rows = ~vis.any(axis=-1)
    assert hidden_rows.any()
    got = out[hidden_rows]
    assert np.all(got == 0.0), f"fully masked rows are not exact zeros: {got[got != 0][:5]} {case}"
    # and every other row is still right
    expected, stats = oracle_of(case, mask=np.array(mask) if mask.dtype == mx.bool_ else to_np(mask))
    tol = oracle.parity_tolerance(expected, stats, case.dtype_name, D)
    ratio, err = oracle.compare(out, expected, tol)
    assert ratio <= 1.0, case


def _five(x, layered):
    return x if layered else x[None]


def _unfive(x, layered):
    """_five undone: x back in the case's own layout."""
    return x if layered else x[0]


def _additive_mask(case, shape):
    """The case's additive mask as numpy, broadcast to the 5-D `shape` (NL, B, H_q, L, S)."""
    add = to_np(case.mask)
    return np.broadcast_to(add.reshape((1,) * (5 - add.ndim) + add.shape), shape)


def _garbage(case, kv, hidden, rng, values):
    """kv with `values` (cycled) written where hidden (NL,B,H_kv,S) is True; same layout."""
    arr = to_np(kv)
    lay = _five(arr, case.layered)
    g = rng.choice(values, size=lay.shape)
    lay = np.where(hidden[..., None], g, lay)
    return to_mx(_unfive(lay, case.layered), kv.dtype)


@examples(4)
@given(
    case=attention_cases(mask_kinds=("bool", "additive", "causal", "none")),
    seed=st.integers(0, 2**32 - 1),
    garbage=st.sampled_from(([np.nan], [np.inf, -np.inf], [1e30, -1e30], [np.nan, np.inf, 1e30, -1e30])),
)
def test_hidden_keys_may_hold_garbage(case, backend, seed, garbage):
    check_hidden_garbage(case, backend, seed, garbage)


def check_hidden_garbage(case, backend, seed, garbage):
    """`garbage` written into K and V where every query row of the kv head is blind changes no bit."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    vis = oracle.visibility((NL, B, H_q, L, D), S, case.np_mask(), case.np_key_ranges())
    G = H_q // H_kv
    hidden = ~vis.reshape(NL, B, H_kv, G * L, S).any(axis=-2)  # hidden from every row of the kv head
    rng = np.random.default_rng(seed)
    k = _garbage(case, case.k, hidden, rng, garbage)
    v = _garbage(case, case.v, hidden, rng, garbage)
    clean = run_case(case, backend)
    dirty = run_case(case, backend, k=k, v=v)
    assert mx.array_equal(clean, dirty), (
        f"garbage {garbage} in {int(hidden.sum())} hidden keys changed the output: {case}"
    )


@examples(4)
@given(
    # "none": key ranges alone hide keys, which the GPU matrix kernel leaves unguarded
    case=quantized_cases(mask_kinds=("bool", "additive", "causal", "none")),
    seed=st.integers(0, 2**32 - 1),
)
def test_quantized_hidden_keys_may_hold_garbage(case, backend, seed):
    """Garbage scales/biases (NaN, Inf) of hidden keys must not leak either."""
    check_quantized_hidden_garbage(case, backend, seed)


def check_quantized_hidden_garbage(case, backend, seed):
    """NaN / Inf / 1e30 in the scales and biases of keys every query row of the kv head is blind
    to (quantized K and V) changes no bit."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    vis = oracle.visibility((NL, B, H_q, L, D), S, case.np_mask(), case.np_key_ranges())
    hidden = ~vis.reshape(NL, B, H_kv, (H_q // H_kv) * L, S).any(axis=-2)
    rng = np.random.default_rng(seed)

    def dirty(t):
        codes, scales, biases = t
        return (codes, _garbage(case, scales, hidden, rng, [np.nan, np.inf]),
                _garbage(case, biases, hidden, rng, [np.nan, -np.inf, 1e30]))

    clean = run_case(case, backend)
    out = run_case(case, backend, k=dirty(case.k), v=dirty(case.v))
    assert mx.array_equal(clean, out), case


def _poisoned_rows(case, backend, which, where):
    """Writes NaN (or +inf into a mask) at one visible key of `case`; returns (clean output,
    poisoned output, rows that see it (NL, B, H_q, L), rows that must be NaN there, the value's
    dim or None), 5-D; None when no row sees a key."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    G = H_q // H_kv
    vis = oracle.visibility((NL, B, H_q, L, D), S, case.np_mask(), case.np_key_ranges())
    rng = np.random.default_rng(which)
    override, dim = {}, None
    if where in ("mask_nan", "mask_inf"):
        base = _additive_mask(case, vis.shape) if case.mask_kind == "additive" else np.zeros(vis.shape)
        rows = np.argwhere(vis)
        if not len(rows):
            return None
        hit = tuple(rows[rng.integers(len(rows))])
        clean_mask = np.where(vis, base, -np.inf)
        poisoned_mask = clean_mask.copy()
        poisoned_mask[hit] = np.nan if where == "mask_nan" else np.inf
        sees = np.zeros(vis.shape[:-1], bool)
        sees[hit[:-1]] = True
        must = sees
        clean = run_case(case, backend, mask=to_mx(_unfive(clean_mask, case.layered), mx.float32))
        override["mask"] = to_mx(_unfive(poisoned_mask, case.layered), mx.float32)
    else:
        seen = vis.reshape(NL, B, H_kv, G * L, S).any(axis=-2)
        keys = np.argwhere(seen)
        if not len(keys):
            return None
        l, b, h, j = keys[rng.integers(len(keys))]
        sees = np.zeros(vis.shape[:-1], bool)
        sees[l, b, h * G:(h + 1) * G] = vis[l, b, h * G:(h + 1) * G, :, j]
        must = sees
        if where == "scales":  # one group's scale of the key, quantized K
            codes, scales, biases = case.k
            arr = _five(to_np(scales), case.layered).copy()
            arr[l, b, h, j, rng.integers(arr.shape[-1])] = np.nan
            override["k"] = (codes, to_mx(_unfive(arr, case.layered), scales.dtype), biases)
        else:
            kv = case.k if where == "k" else case.v
            arr = _five(to_np(kv), case.layered).copy()
            d = rng.integers(D)
            arr[l, b, h, j, d] = np.nan
            override[where] = to_mx(_unfive(arr, case.layered), kv.dtype)
            dim = d if where == "v" else None
            if where == "v":  # a weight that underflows float32 to 0 takes no part of the value
                must = sees.copy()
                must[l, b, h * G:(h + 1) * G] &= _key_weights(case, vis, l, b, h, j) > WEIGHT_SEEN
        clean = run_case(case, backend)
    poisoned = run_case(case, backend, **override)
    return _five(to_np(clean), case.layered), _five(to_np(poisoned), case.layered), sees, must, dim


# A visible value's weight above this (in float64) is far from float32's underflow (1e-38, and the
# kernels' exp2 flushes subnormals): its NaN must reach the output. Below it the kernels may skip
# the value, as a zero weight, and the reference's matmul may not (0 x NaN): unspecified.
WEIGHT_SEEN = 1e-30


def _key_weights(case, vis, l, b, h, j):
    """float64 softmax weight of key j in each row (G, L) of kv head h of layer l, request b."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    G = H_q // H_kv
    q = _five(to_np(case.q), case.layered)[l, b, h * G:(h + 1) * G].astype(np.float64)
    k = _five(to_np(case.k), case.layered)[l, b, h].astype(np.float64)
    s = (D ** -0.5 if case.scale is None else case.scale) * q @ k.T  # (G, L, S)
    if case.mask_kind == "additive":
        s = s + _additive_mask(case, vis.shape)[l, b, h * G:(h + 1) * G]
    with np.errstate(invalid="ignore"):
        s = np.where(vis[l, b, h * G:(h + 1) * G], s, -np.inf)
        return np.exp(s[..., j] - s.max(axis=-1))


def check_poisoned_rows(case, backend, which, where):
    """False when the case has no visible key to poison; True when it passed."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    result = _poisoned_rows(case, backend, which, where)
    if result is None:
        return False
    clean, poisoned, sees, must, dim = result
    hit = poisoned[must] if dim is None else poisoned[must][:, dim]
    assert np.isnan(hit).all(), f"{where}: rows that see the NaN are not NaN: {hit[~np.isnan(hit)][:5]} {case}"
    if dim is None:  # every other row, of this head group too, is the clean call's to the bit
        same = ~sees
    else:  # a group's rows that do not see the value may take 0 x NaN through its matmul
        G = H_q // H_kv
        group = sees.reshape(NL, B, H_kv, G * L).any(axis=-1)
        same = ~np.repeat(group, G * L, axis=-1).reshape(sees.shape)
    assert np.array_equal(poisoned[same], clean[same]), f"{where}: NaN changed rows that do not see it: {case}"
    return True


@examples(4)
@given(
    case=attention_cases(mask_kinds=("bool", "additive", "causal", "none")),
    which=st.integers(0, 2**32 - 1),
    where=st.sampled_from(("k", "v", "mask_nan", "mask_inf")),
)
def test_nan_reaching_a_visible_score_gives_nan_rows(case, backend, which, where):
    assume(check_poisoned_rows(case, backend, which, where))


@examples(2)
@given(
    case=quantized_cases(mask_kinds=("bool", "causal", "none")),
    which=st.integers(0, 2**32 - 1),
)
def test_quantized_nan_scale_of_a_visible_key_gives_nan_rows(case, backend, which):
    assume(check_poisoned_rows(case, backend, which, "scales"))
