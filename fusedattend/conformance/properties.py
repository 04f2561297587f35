"""The conformance properties: each one a check of a kernel on one case.

    from fusedattend.conformance import cases, kernels, properties
    kernel = kernels.load("mlx.core:fast.scaled_dot_product_attention")
    properties.check("parity", kernel, cases.build(cases.Spec(B=1, H_q=4, H_kv=1, L=1, S=129, D=64)))

A check returns the case's error-to-tolerance ratio (None where it compares bits), or raises
`Failure` with one line saying what broke; `kernels.Refused` passes through (the kernel does not
take the input: conforming). Two kinds:
    required    every correct kernel passes them: parity, quantized_parity, batch_invariance,
                layer_invariance, slice_invariance, masked_garbage, gqa, determinism, mask_forms
    semantics   choices that legitimately differ between kernels, reported as findings:
                fully_masked_row (fusedattend: zeros), masked_nan_values (NaN or Inf in a
                masked-out value row never reaches the output), partly_hidden_nan_values (NaN
                or Inf in the value of a key some rows see reaches the rows that weigh it, and
                no row that does not see it or weighs it 0)
Tolerances are oracle.py's, derived in docs/testing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import cases as C
from . import compare


class Failure(AssertionError):
    """A property does not hold. `finding` is the semantics property's one-line classification."""

    def __init__(self, message, finding=None, ratio=None):
        super().__init__(message)
        self.message, self.finding, self.ratio = message, finding, ratio
        self.spec = None


# ---------------------------------------------------------------------------------------------
# required


def parity(kernel, case):
    out = kernel.call(case)
    expected, stats = C.oracle_of(case)
    rows = C.seen_rows(case)
    ratio, err = compare.ratio(C.to_np(out), expected, compare.tolerance(kernel, case, expected, stats), rows)
    compare.target(ratio, "err/tol")
    if ratio > 1.0:
        raise Failure(f"off the float64 oracle by {compare.off_by(err, ratio)} ({case.dtype_name}, S={case.spec.S})",
                      ratio=ratio)
    return ratio


def _take(x, axis, i):
    if isinstance(x, tuple):
        return tuple(_take(a, axis, i) for a in x)
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(i, i + 1)
    return x[tuple(idx)]


def _request_mask(mask, b, B):
    """Request b's part of an array mask: its request axis (fourth from the right, in front of
    heads, rows and keys) sliced where it is full size; a mask broadcast over the requests (that
    axis 1 or missing) serves each request as it is."""
    if mask is None or isinstance(mask, str) or mask.ndim < 4 or mask.shape[-4] != B:
        return mask
    return _take(mask, mask.ndim - 4, b)


def batch_invariance(kernel, case):
    """Request b of a batch, bit for bit, is request b called alone (its mask rows, its key
    range), with a layer axis or without."""
    whole = kernel.call(case)
    axis = 1 if case.layered else 0
    B = case.spec.B
    for b in range(B):
        one = kernel.call(case, q=_take(case.q, axis, b), k=_take(case.k, axis, b), v=_take(case.v, axis, b),
                          mask=_request_mask(case.mask, b, B), key_ranges=case.request_key_ranges(b))
        why = compare.differs(_take(whole, axis, b), one)
        if why:
            raise Failure(f"request {b} of {case.spec.B} alone differs from its slice of the batch: {why}")
    return None


def layer_invariance(kernel, case):
    """A call with a layer axis, bit for bit, is the stack of its layers' own 4-D calls (each
    with its layer's part of a 5-D mask)."""
    whole = kernel.call(case)
    per = [kernel.call(case, q=case.q[l], k=_index(case.k, l), v=_index(case.v, l), mask=_layer_mask(case.mask, l))
           for l in range(case.spec.NL)]
    for l, one in enumerate(per):
        why = compare.differs(whole[l], one)
        if why:
            raise Failure(f"layer {l} of {case.spec.NL} differs from its own 4-D call: {why}")
    return None


def _index(x, l):
    return tuple(a[l] for a in x) if isinstance(x, tuple) else x[l]


def _layer_mask(mask, l):
    """Layer l's part of an array mask: a 5-D mask's layer axis indexed (its one layer where it
    is broadcast); masks of fewer axes serve every layer."""
    if mask is None or isinstance(mask, str) or mask.ndim < 5:
        return mask
    return mask[l] if mask.shape[0] > 1 else mask[0]


def _in_longer_buffer(x, transposed, rng):
    """x (…, H, S, D) as a view into a longer buffer holding garbage past S (NaN where x is
    float, random codes where it is not); `transposed`: the buffer is (…, S', H, D)."""
    import mlx.core as mx

    extra = 5 + int(rng.integers(0, 40))
    pad_shape = x.shape[:-2] + (extra, x.shape[-1])
    if x.dtype == mx.uint32:
        pad = mx.array(rng.integers(0, 2**32, pad_shape, dtype=np.uint64).astype(np.uint32))
    else:
        pad = mx.full(pad_shape, float("nan"), dtype=x.dtype)
    S = x.shape[-2]
    if not transposed:
        buf = mx.concatenate([x, pad], axis=-2)
        mx.eval(buf)
        return buf[..., :S, :]
    buf = mx.contiguous(mx.concatenate([x, pad], axis=-2).swapaxes(-2, -3))
    mx.eval(buf)
    return buf.swapaxes(-2, -3)[..., :S, :]


def slice_invariance(kernel, case):
    """K/V as slices of a longer cache (garbage past the slice's end), head-major or with the
    heads inside the sequence axis, give the bits of the contiguous call."""
    import mlx.core as mx

    rng = np.random.default_rng(case.spec.seed + 1)
    whole = kernel.call(case)
    for transposed in (False, True):
        wrap = lambda t: (tuple(_in_longer_buffer(a, transposed, rng) for a in t) if isinstance(t, tuple)
                          else _in_longer_buffer(t, transposed, rng))
        sliced = kernel.call(case, k=wrap(case.k), v=wrap(case.v))
        why = compare.differs(whole, sliced)
        if why:
            form = "(…, S, H, D) buffer" if transposed else "(…, H, S, D) buffer"
            raise Failure(f"K/V sliced from a longer {form} with NaN past S differ from the contiguous call: {why}")
    return None


def _hidden_keys(case):
    """(NL|1, B, H_kv, S) boolean: keys no query row of the kv head sees; None when none is."""
    sp = case.spec
    vis = C.case_visibility(case)
    G = sp.H_q // sp.H_kv
    hidden = ~vis.reshape(vis.shape[0], sp.B, sp.H_kv, G * sp.L, sp.S).any(axis=-2)
    return hidden if hidden.any() else None


def _write(case, x, hidden, values, rng):
    """x (an array of the case's K/V layout, or a triple's scales/biases) with `values` drawn
    into the hidden keys' rows."""
    arr = C.to_np(x)
    lay = arr if case.layered else arr[None]
    garbage = rng.choice(np.asarray(values, np.float64), size=lay.shape)
    lay = np.where(hidden[..., None], garbage, lay)
    lay = lay if case.layered else lay[0]
    return C.to_mx(lay, C.dtype_name(x))


def _dirty(case, which, hidden, values, rng):
    x = getattr(case, which)
    if isinstance(x, tuple):  # quantized: the garbage goes into the scales and biases
        codes, scales, biases = x
        return (codes, _write(case, scales, hidden, values, rng), _write(case, biases, hidden, values, rng))
    return _write(case, x, hidden, values, rng)


def _compared_rows(case, clean):
    """The rows whose bits a garbage property compares (boolean over the leading (…, H_q, L)
    axes): those that see a key, and those that see none where the clean call gives them exact
    zeros (the kernel chose zeros: garbage must not make them anything else). A kernel with
    another choice for them answers to fully_masked_row alone."""
    seen = C.seen_rows(case)
    blind = ~seen
    if blind.any() and np.all(C.to_np(clean)[blind] == 0.0):
        return np.ones_like(seen)
    return seen


def masked_garbage(kernel, case):
    """K rows no query row of their kv head sees may hold NaN, +-Inf or huge values, and V rows
    huge finite ones, without changing a bit of any row that sees a key (masked_nan_values
    covers NaN in V, fully_masked_row the rows that see none)."""
    hidden = _hidden_keys(case)
    if hidden is None:
        return None
    rng = np.random.default_rng(case.spec.seed + 2)
    big = C.LARGE[case.dtype_name]
    clean = kernel.call(case)
    k = _dirty(case, "k", hidden, [np.nan, np.inf, -np.inf, big, -big], rng)
    v = _dirty(case, "v", hidden, [big, -big], rng)
    rows = _compared_rows(case, clean)
    why = compare.differs(clean, kernel.call(case, k=k, v=v), rows)
    if why:
        where = [what for what, kv in (("K (NaN, Inf, huge)", {"k": k}), ("V (huge finite)", {"v": v}))
                 if compare.differs(clean, kernel.call(case, **kv), rows)]
        mask = f"{case.spec.mask} mask" if case.mask is not None else "key ranges"
        finding = f"garbage in masked-out {' and '.join(where) or 'K and V together'} reaches the output ({mask})"
        raise Failure(f"{finding}: {why}", finding=finding)
    return None


def gqa(kernel, case):
    """Query head h reads kv head h // (H_q / H_kv): the GQA call is within twice the parity
    tolerance of the MHA call on K/V repeated per query head."""
    import mlx.core as mx

    G = case.spec.H_q // case.spec.H_kv
    rep = lambda t: tuple(rep(a) for a in t) if isinstance(t, tuple) else mx.repeat(t, G, axis=t.ndim - 3)
    grouped = kernel.call(case)
    mha = kernel.call(case, k=rep(case.k), v=rep(case.v))
    expected, stats = C.oracle_of(case)
    ratio, err = compare.ratio(C.to_np(grouped), C.to_np(mha), compare.tolerance(kernel, case, expected, stats, 2.0),
                        C.seen_rows(case))
    compare.target(ratio, "gqa err/tol")
    if ratio > 1.0:
        raise Failure(f"GQA (H_q={case.spec.H_q}, H_kv={case.spec.H_kv}) differs from MHA on repeated K/V by "
                      f"{compare.off_by(err, ratio)}", ratio=ratio)
    return ratio


def _copy(x):
    import mlx.core as mx

    if isinstance(x, tuple):
        return tuple(_copy(a) for a in x)
    if isinstance(x, mx.array):
        y = mx.array(x)
        mx.eval(y)
        return y
    return x


def determinism(kernel, case):
    """Two identical calls, and a call on fresh copies of the inputs, give the same bits."""
    a = kernel.call(case)
    b = kernel.call(case)
    c = kernel.call(case, q=_copy(case.q), k=_copy(case.k), v=_copy(case.v), mask=_copy(case.mask),
                    key_ranges=_copy(case.key_ranges))
    for other, what in ((b, "a repeated call"), (c, "a call on fresh copies")):
        why = compare.differs(a, other)
        if why:
            raise Failure(f"{what} gave other bits: {why}")
    return None


def mask_forms(kernel, case):
    """"causal" is the explicit lower-right boolean mask (j <= S_end - L + i) within twice the
    parity tolerance, and a boolean mask is the additive 0 / -inf mask of the same pattern (in
    the queries' dtype and in float32) bit for bit."""
    if case.spec.mask == "causal":
        return _causal_is_explicit(kernel, case)
    if case.spec.mask == "bool":
        return _bool_is_additive(kernel, case)
    return None


def _causal_is_explicit(kernel, case):
    """Within tolerance, not bits: a kernel may size its split over S from the causal bound,
    which changes the float32 summation order."""
    import mlx.core as mx

    sp = case.spec
    expected, stats = C.oracle_of(case)
    tol = compare.tolerance(kernel, case, expected, stats, 2.0)
    end = np.array([[[[sp.S]]]]) if case.key_ranges is None else C.key_range_ends(case)[:, None, None, None]
    explicit = mx.array(np.arange(sp.S) <= end - sp.L + np.arange(sp.L)[:, None])  # (B|1, 1, L, S)
    a, b = kernel.call(case), kernel.call(case, mask=explicit)
    ratio, err = compare.ratio(C.to_np(a), C.to_np(b), tol, C.seen_rows(case))
    compare.target(ratio, "mask forms err/tol")
    if ratio > 1.0:
        raise Failure(f'"causal" and the explicit lower-right boolean mask differ by {compare.off_by(err, ratio)}',
                      ratio=ratio)
    return ratio


def _bool_is_additive(kernel, case):
    """Bits: adding +0.0 to a score is exact and both masks hide the same keys, so every float
    operation sees the same operands; other bits mean other arithmetic per mask kind."""
    from .kernels import KernelFailure, Refused

    vis = np.array(case.mask)
    a = kernel.call(case)
    for dtype in dict.fromkeys((case.dtype_name, "float32")):
        try:
            b = kernel.call(case, mask=C.to_mx(np.where(vis, 0.0, -np.inf), dtype))
        except Refused:
            if dtype == case.dtype_name:
                raise
            continue  # a kernel may take additive masks in the queries' dtype only
        except KernelFailure as e:  # e.g. the mask's dtype promoting the output's
            raise Failure(f"with a {dtype} additive mask for {case.dtype_name} queries, {e}") from None
        why = compare.differs(a, b, _compared_rows(case, a))
        if why:
            raise Failure(f"a boolean mask and the additive 0/-inf mask ({dtype}) differ: {why}")
    return None


# ---------------------------------------------------------------------------------------------
# semantics


def fully_masked_row(kernel, case):
    """A row that sees no key gives exact zeros (fusedattend's choice)."""
    out = C.to_np(kernel.call(case))
    blind = ~C.seen_rows(case)
    if not blind.any():
        return None
    got = out[blind]
    if np.all(got == 0.0):
        return None
    k, v = C.np_kv(case)
    v5 = v if case.layered else v[None]
    G = case.spec.H_q // case.spec.H_kv
    mean = np.repeat(v5.mean(axis=-2), G, axis=-2)[..., None, :]  # (NL, B, H_q, 1, D)
    mean = np.broadcast_to(mean, (v5.shape[0], case.spec.B, case.spec.H_q, case.spec.L, case.spec.D))
    mean = (mean if case.layered else mean[0])[blind]
    if np.isnan(got).any():
        finding = "a fully masked row is NaN (fusedattend: zeros)"
    elif np.allclose(got, mean, rtol=2e-2, atol=2e-2):
        finding = "a fully masked row is the mean of V over all keys (fusedattend: zeros)"
    else:
        finding = f"a fully masked row is neither zeros nor the mean of V (max |out| {np.abs(got).max():.3g})"
    raise Failure(f"{int(blind.sum())} fully masked rows: {finding}", finding=finding)


def masked_nan_values(kernel, case):
    """NaN or Inf in V rows no query row of their kv head sees changes no bit of a row that
    sees a key."""
    hidden = _hidden_keys(case)
    if hidden is None:
        return None
    rng = np.random.default_rng(case.spec.seed + 3)
    clean = kernel.call(case)
    dirty = kernel.call(case, v=_dirty(case, "v", hidden, [np.nan, np.inf, -np.inf], rng))
    why = compare.differs(clean, dirty, _compared_rows(case, clean))
    if why:
        finding = "NaN or Inf in a masked-out value row reaches the output (0 x NaN)"
        raise Failure(f"{finding}: {why}", finding=finding)
    return None


# A weight above this (float64) is far from float32's underflow (1e-38; a kernel's exp2 may flush
# subnormals): a value it weighs reaches the row. A weight of exactly 0 in float64 is 0 in float32
# too: its value is skipped. Between the two a float32 weight may or may not underflow: unspecified.
WEIGHT_SEEN = 1e-30
# An additive mask entry that keeps a key visible at a weight of exactly 0, finite in the dtype.
UNDERFLOW = {"float32": -1e6, "bfloat16": -1e6, "float16": -3e4}


def _underflowing_mask(case, vis, rng):
    """The case's additive mask with UNDERFLOW at about half its visible entries, full shape
    (…, H_q, L, S), in the mask's dtype."""
    name = C.dtype_name(case.mask)
    m = case.np_mask()
    m = np.broadcast_to(m.reshape((1,) * (5 - m.ndim) + m.shape), vis.shape)
    m = np.where(vis & (rng.random(vis.shape) < 0.5), UNDERFLOW[name], m)
    return C.to_mx(m if case.layered else m[0], name)


def _poisoned_keys(case, vis, rng):
    """(NL|1, B, H_kv, S) boolean: up to three keys, drawn from those some query rows of their
    kv head see and others do not, else from those some row sees; None when no row sees a key."""
    sp = case.spec
    seen = vis.reshape(vis.shape[0], sp.B, sp.H_kv, (sp.H_q // sp.H_kv) * sp.L, sp.S)
    partly = seen.any(axis=-2) & ~seen.all(axis=-2)
    pool = np.argwhere(partly if partly.any() else seen.any(axis=-2))
    if not len(pool):
        return None
    keys = np.zeros(partly.shape, bool)
    for i in rng.choice(len(pool), size=min(3, len(pool)), replace=False):
        keys[tuple(pool[i])] = True
    return keys


def partly_hidden_nan_values(kernel, case):
    """NaN or +-Inf in the values of a few keys, those some query rows of their kv head see and
    others do not where there are such (causal with L > 1, per-row or per-head masks), reaches
    exactly the rows that weigh them: a row that does not see them, or weighs them 0 (on additive
    masks, for half the seeds, entries that underflow the weight), keeps every bit, even through
    0 x NaN; a row that weighs one above WEIGHT_SEEN is not finite in any column."""
    sp = case.spec
    rng = np.random.default_rng(sp.seed + 4)
    vis = C.case_visibility(case)
    keys = _poisoned_keys(case, vis, rng)
    if keys is None:
        return None
    # the seed picks the garbage and, on additive masks, whether weights underflow: a caller
    # with fixed cases covers each of the six by its seeds 0 to 5
    garbage = (np.nan, np.inf, -np.inf)[sp.seed % 3]
    over = {"mask": _underflowing_mask(case, vis, rng)} if sp.mask == "additive" and sp.seed // 3 % 2 else {}
    clean = kernel.call(case, **over)
    dirty = kernel.call(case, v=_dirty(case, "v", keys, [garbage], rng), **over)
    G = sp.H_q // sp.H_kv
    w = C.weights(case, C.np_mask(over.get("mask", case.mask)))
    weigh = np.where(np.repeat(keys, G, axis=2)[:, :, :, None, :], w, 0.0).max(axis=-1)  # (NL|1, B, H_q, L)
    weigh = weigh if case.layered else weigh[0]
    why = compare.differs(clean, dirty, (weigh == 0) & _compared_rows(case, clean))
    if why:
        finding = "NaN or Inf in the value of a key some rows see reaches rows that do not see it or weigh it 0 (0 x NaN)"
        raise Failure(f"{finding}: {garbage} there: {why}", finding=finding)
    finite = np.isfinite(C.to_np(dirty)[weigh > WEIGHT_SEEN])
    if finite.any():
        finding = "NaN or Inf in the value of a key leaves finite outputs in rows that weigh it"
        raise Failure(f"{finding}: {garbage} there, {int(finite.sum())} finite elements", finding=finding)
    return None


# ---------------------------------------------------------------------------------------------
# the registry


# properties about keys a mask hides: they need a kernel that takes a mask or key ranges
MASKED = ("masked_garbage", "masked_nan_values", "partly_hidden_nan_values", "fully_masked_row")


@dataclass(frozen=True)
class Property:
    name: str
    kind: str  # "required" or "semantics"
    check: object
    factor: float = 1.0
    pinned: tuple = ()  # cases.pinned groups
    needs: dict = field(default_factory=dict)  # cases.specs keywords

    def doc(self):
        return " ".join((self.check.__doc__ or "").split())

    def quantized_cases(self, kernel):
        return self.name == "quantized_parity" or not kernel.plain

    def not_applicable(self, kernel):
        """Why this property does not apply to the kernel, or None."""
        sup = kernel.supports
        if self.name == "parity" and not kernel.plain:
            return "the convention takes quantized K/V (see quantized_parity)"
        if self.name == "quantized_parity" and not kernel.quantized:
            return f"the {kernel.convention} convention takes no quantized K/V"
        if self.name == "layer_invariance" and not sup.layers:
            return "no layer axis (convention fusedattend with layers=yes has it)"
        if self.name == "batch_invariance" and sup.max_B < 2:
            return "max_B=1"
        if self.name == "gqa" and not sup.gqa:
            return "gqa=no"
        if self.name == "mask_forms" and not ("bool" in sup.masks and ({"causal", "additive"} & set(sup.masks))):
            return "needs a boolean mask and causal or additive masks"
        if self.name in MASKED and not (
                {"bool", "additive"} & set(sup.masks) or sup.key_ranges):
            return "no mask that hides keys (boolean, additive or key ranges)"
        return None

    def strategy(self, kernel, profile):
        needs = dict(self.needs)
        sup = kernel.supports
        if self.name in MASKED:
            arrays = tuple(m for m in ("bool", "additive") if m in sup.masks)
            needs["masks"] = arrays or sup.masks
            if not arrays:
                needs["key_ranges"] = True
        if self.name == "mask_forms":
            needs["masks"] = self.strategy_masks(kernel)
        return C.specs(kernel, profile, quantized=self.quantized_cases(kernel), **needs)

    def strategy_masks(self, kernel):
        """mask_forms' starting masks: "causal" (vs the explicit boolean mask), "bool" (vs additive)."""
        sup = kernel.supports.masks
        return tuple(k for k, other in (("causal", "causal"), ("bool", "additive")) if other in sup and "bool" in sup)

    def pinned_specs(self, kernel):
        out = []
        for group in self.pinned:
            if group == "layers" and not kernel.supports.layers:
                continue
            out += C.pinned(kernel, group, quantized=self.quantized_cases(kernel))
        if self.name == "batch_invariance":
            out = [s for s in out if s.B > 1]
        if self.name == "layer_invariance":
            out = [s for s in out if s.NL]
        if self.name == "gqa":
            out = [s for s in out if s.H_q > s.H_kv]
        if self.name == "fully_masked_row":
            out = [s for s in out if s.masked_row]
        if self.name == "mask_forms":  # its two checks start from "causal" or a boolean mask
            out = [s for s in out if s.mask in self.strategy_masks(kernel)]
        return out


PROPERTIES = {p.name: p for p in (
    Property("parity", "required", parity, 2.0, ("grid", "layers", "batch")),
    Property("quantized_parity", "required", parity, 2.0, ("grid",)),
    Property("batch_invariance", "required", batch_invariance, 1.0, ("batch", "layers"), {"min_B": 2}),
    Property("layer_invariance", "required", layer_invariance, 1.0, ("layers",), {"layered": True}),
    Property("slice_invariance", "required", slice_invariance, 0.5, ("batch",)),
    Property("masked_garbage", "required", masked_garbage, 1.0, ("masks",), {"holes": True}),
    Property("gqa", "required", gqa, 1.0, ("grid",), {"gqa": True}),
    Property("determinism", "required", determinism, 0.5, ("batch",)),
    Property("mask_forms", "required", mask_forms, 0.5, ("masks",)),
    Property("fully_masked_row", "semantics", fully_masked_row, 0.5, ("masks",), {"masked_row": True}),
    Property("masked_nan_values", "semantics", masked_nan_values, 0.5, ("masks",), {"holes": True}),
    Property("partly_hidden_nan_values", "semantics", partly_hidden_nan_values, 0.5, ("masks",), {"holes": True}),
)}


def check(name, kernel, case):
    """Runs property `name` on one case: its ratio, or None; raises Failure."""
    return PROPERTIES[name].check(kernel, case)
