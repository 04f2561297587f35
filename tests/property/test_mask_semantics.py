"""Mask semantics. The first four and the last are conformance.properties' (mask_forms,
fully_masked_row with parity, masked_garbage with masked_nan_values, partly_hidden_nan_values)
on this suite's cases; the NaN rows, the two reported leaks and the zero-weight patterns are
this suite's own.

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
* NaN / Inf in the value (or quantized value scales) of a key reaches only the rows that weigh
  it: a row that does not see the key (causal with L > 1, per-row and per-head masks, another
  request's range) or weighs it 0 (a score that underflows, e.g. an additive -1e6) is the clean
  call's to the bit, whatever other rows of its GQA group, request or layer see; a row that
  weighs it above WEIGHT_SEEN is not finite.
"""

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from hypothesis import assume, given
from hypothesis import strategies as st

from fusedattend.conformance import cases as conformance_cases
from fusedattend.conformance import oracle
from fusedattend.conformance.properties import UNDERFLOW, WEIGHT_SEEN
from tests.property.conformance_adapter import check, conformance_case
from tests.property.strategies import examples, attention_cases, quantized_cases, run_case, to_mx, to_np

# an additive mask entry that keeps a key visible at a weight of exactly 0 (float32 masks here)
UNDERFLOW32 = UNDERFLOW["float32"]


def _explicit_visibility(case):
    """(B,H_q,L,S) or (NL,B,H_q,L,S) boolean array of the case's visibility (mask+ranges)."""
    vis = oracle.visibility(tuple(case.dims[:3]) + (case.dims[4], case.dims[6]), case.dims[5], case.np_mask(), case.np_key_ranges())
    return _unfive(vis, case.layered)


@examples(4)
@given(case=attention_cases(mask_kinds=("causal",)))
def test_causal_equals_explicit_lower_right_bool(case, backend):
    check("mask_forms", case, backend)


@examples(4)
@given(case=attention_cases(mask_kinds=("bool",)))
def test_bool_equals_additive_zero_neg_inf(case, backend):
    check("mask_forms", case, backend)


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
        masked = replace(case, mask=to_mx(np.where(vis, add, -np.inf), case.mask.dtype))
    else:
        masked = replace(case, mask=mx.array(vis), mask_kind="bool")
    assert (~vis.any(axis=-1)).any()
    check("fully_masked_row", masked, backend)
    check("parity", masked, backend)  # and every other row is still right


def _five(x, layered):
    return x if layered else x[None]


def _unfive(x, layered):
    """_five undone: x back in the case's own layout."""
    return x if layered else x[0]


def _additive_mask(case, shape):
    """The case's additive mask as numpy, broadcast to the 5-D `shape` (NL, B, H_q, L, S)."""
    add = to_np(case.mask)
    return np.broadcast_to(add.reshape((1,) * (5 - add.ndim) + add.shape), shape)


@examples(4)
@given(case=attention_cases(mask_kinds=("bool", "additive", "causal", "none")))
def test_hidden_keys_may_hold_garbage(case, backend):
    check_hidden_garbage(case, backend)


@examples(4)
# "none": key ranges alone hide keys, which the GPU matrix kernel leaves unguarded
@given(case=quantized_cases(mask_kinds=("bool", "additive", "causal", "none")))
def test_quantized_hidden_keys_may_hold_garbage(case, backend):
    """Garbage scales/biases (NaN, Inf) of hidden keys must not leak either."""
    check_hidden_garbage(case, backend)


def check_hidden_garbage(case, backend):
    """NaN, +-Inf and huge values in the K and V (quantized: their scales and biases) of keys
    every query row of their kv head is blind to change no bit (masked_garbage: NaN, Inf and
    huge values in K, huge ones in V; masked_nan_values: NaN and Inf in V)."""
    check("masked_garbage", case, backend)
    check("masked_nan_values", case, backend)


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
            if where == "v":  # a row that weighs the value 0 takes no part of it
                w = _key_weights(case, l, b, h, j)
                must, takes = sees.copy(), sees.copy()
                must[l, b, h * G:(h + 1) * G] &= w > WEIGHT_SEEN
                takes[l, b, h * G:(h + 1) * G] &= w > 0
        clean = run_case(case, backend)
    poisoned = run_case(case, backend, **override)
    if dim is None:
        takes = sees
    return _five(to_np(clean), case.layered), _five(to_np(poisoned), case.layered), sees, must, dim, takes


def _key_weights(case, l, b, h, j):
    """float64 softmax weight of key j in each row (G, L) of kv head h of layer l, request b."""
    G = case.dims[2] // case.dims[3]
    return conformance_cases.weights(conformance_case(case))[l, b, h * G:(h + 1) * G, :, j]


def check_poisoned_rows(case, backend, which, where):
    """False when the case has no visible key to poison; True when it passed."""
    NL, B, H_q, H_kv, L, S, D = case.dims
    result = _poisoned_rows(case, backend, which, where)
    if result is None:
        return False
    clean, poisoned, sees, must, dim, takes = result
    hit = poisoned[must] if dim is None else poisoned[must][:, dim]
    assert np.isnan(hit).all(), f"{where}: rows that see the NaN are not NaN: {hit[~np.isnan(hit)][:5]} {case}"
    # Every other row, of this head group too, is the clean call's to the bit; for a value, so
    # are the other columns of the rows that weigh it.
    same = np.broadcast_to(~sees[..., None], poisoned.shape).copy()
    if dim is not None:
        same[:] = True
        same[..., dim] = ~takes
    assert np.array_equal(poisoned[same], clean[same]), f"{where}: NaN changed what does not weigh it: {case}"
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


@examples(4)
@given(case=attention_cases(mask_kinds=("bool", "additive", "causal", "none")))
def test_garbage_values_reach_only_rows_that_weigh_them(case, backend):
    check("partly_hidden_nan_values", case, backend)


@examples(2)
@given(case=quantized_cases(mask_kinds=("bool", "additive", "causal", "none")))
def test_quantized_nan_value_scales_reach_only_rows_that_weigh_them(case, backend):
    check("partly_hidden_nan_values", case, backend)


def test_the_two_reported_leaks(backend):
    """Causal masking hides key 3 from row 0, whose value holds NaN; an additive -1e6 gives a
    visible key the weight 0. Neither value may reach the row (each once made it all-NaN)."""
    rng = np.random.default_rng(0)
    q = mx.array(rng.standard_normal((1, 1, 2, 64)).astype(np.float32))
    k = mx.array(rng.standard_normal((1, 1, 4, 64)).astype(np.float32))
    clean = rng.standard_normal((1, 1, 4, 64)).astype(np.float32)
    dirty = clean.copy()
    dirty[0, 0, 3] = np.nan

    def run(v, mask):
        return np.array(fa.decode_attention(q, k, mx.array(v), mask=mask, backend=backend))

    causal = run(dirty, "causal")
    assert np.array_equal(causal[0, 0, 0], run(clean, "causal")[0, 0, 0]) and np.isnan(causal[0, 0, 1]).all()
    underflow = mx.array(np.where(np.arange(4) == 3, np.float32(UNDERFLOW32), np.float32(0)))
    assert np.array_equal(run(dirty, underflow), run(clean, underflow))


def check_zero_weight_values_skipped(backend, quantized, pattern, dtype=mx.bfloat16):
    """A value whose key every row weighs exactly 0 in float32 holds NaN (plain V, or its V scales
    quantized); the output is the clean call's to the bit. Patterns:
      masked_block: an additive -1e6 on keys 256.. (a whole key block weighed 0 after a split
                    merge: its own state weighs its keys, the merge must skip it);
      dominant_key: no mask, key 0 scores ~400 above the rest (their weights underflow).
    """
    rng = np.random.default_rng(3)
    B, H_q, H_kv, S, D = 1, 4, 2, 300, 64
    q = rng.standard_normal((B, H_q, 1, D)).astype(np.float32)
    k = rng.standard_normal((B, H_kv, S, D)).astype(np.float32)
    v = rng.standard_normal((B, H_kv, S, D)).astype(np.float32)
    mask, poisoned = None, 280
    if pattern == "masked_block":
        mask = mx.array(np.where(np.arange(S) >= 256, np.float32(UNDERFLOW32), np.float32(0)))
    else:
        q[:] = 1.0
        k[:, :, 0] = 50.0  # 1/8 * 64 * 50 = 400 above keys scoring about 0
        poisoned = 5
    q, k, v = (mx.array(x).astype(dtype) for x in (q, k, v))
    if quantized:
        call, keys, clean_v = fa.quantized_decode_attention, fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
        codes, scales, biases = clean_v
        sc = to_np(scales)
        sc[:, :, poisoned] = np.nan
        dirty, kw = (codes, to_mx(sc, scales.dtype), biases), {"group_size": 32}
    else:
        bad = to_np(v)
        bad[:, :, poisoned] = np.nan
        call, keys, clean_v, dirty, kw = fa.decode_attention, k, v, to_mx(bad, v.dtype), {}
    clean, out = (call(q, keys, vv, mask=mask, backend=backend, **kw) for vv in (clean_v, dirty))
    assert mx.array_equal(clean, out), f"{pattern}: a value weighed 0 reached the output ({backend})"


@pytest.mark.parametrize("pattern", ["masked_block", "dominant_key"])
@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "quantized"])
def test_values_of_zero_weight_are_skipped(backend, quantized, pattern):
    check_zero_weight_values_skipped(backend, quantized, pattern)
