"""Every Hypothesis strategy of the property suite, in one importable module.

    from tests.property.strategies import attention_cases, quantized_cases
    @given(attention_cases())
    def test_x(case, backend): out = fa.decode_attention(*case.qkv, **case.kwargs, backend=backend)

Sizes draw the structure (shapes, dtype, mask kind/shape, key ranges, layout) through Hypothesis
and the numbers from a numpy RNG seeded by a drawn integer: shrinking then works on the shape
and a failing example replays exactly. Edges are always reachable: S = 1, powers of two +- 1,
fully masked rows, GQA ratio = H_q (H_kv = 1), NL = 1, L = 1 and 8, empty key ranges.

Widening: long S (up to 16385) is drawn when the active profile runs >= 200 examples
(`nightly`) or FUSEDATTEND_WIDE=1 is set; otherwise S stays <= 4097 and the big shapes are rare.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Optional

import mlx.core as mx
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from fusedattend import KeyRanges
from fusedattend.conformance.cases import power_of_two_edges

DTYPES = (mx.float32, mx.float16, mx.bfloat16)
DTYPE_NAMES = {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}
HEAD_DIMS = (64, 8, 16, 32, 80, 96, 128, 256)  # supported: multiples of 8 up to 256
BITS = (4, 8, 2)
GROUP_SIZES = (64, 32, 128)
MASK_KINDS = ("none", "causal", "bool", "additive")


def examples(factor: float):
    """settings() scaled: `factor` x the active profile's max_examples (ci: 40, dev: 25).

    The important properties run several times the profile's count on small shapes; the
    profile still controls the overall effort (nightly = 500 x factor)."""
    return settings(max_examples=max(1, int(factor * settings().max_examples)))


def wide() -> bool:
    return os.environ.get("FUSEDATTEND_WIDE") == "1" or settings().max_examples >= 200


def _edges(limit):
    return power_of_two_edges(limit, past=1)  # and limit + 1 where limit is a power of two


def seq_lens(max_small=64):
    """S: mostly small, powers of two +- 1, occasionally long."""
    limit = 16384 if wide() else 4096
    return st.one_of(
        st.integers(1, max_small),
        st.sampled_from(_edges(256)),
        st.sampled_from(_edges(limit)),
    )


def to_mx(a: np.ndarray, dtype) -> mx.array:
    """numpy float -> MLX array of `dtype` (via float32, so bf16 works)."""
    return mx.array(np.asarray(a, dtype=np.float32)).astype(dtype)


def to_np(x: mx.array) -> np.ndarray:
    """MLX array -> numpy (float arrays via float32: exact for f16/bf16); works on any device."""
    if x.dtype in DTYPES:
        return np.array(x.astype(mx.float32))
    return np.array(x)


@dataclass
class Case:
    """One generated attention call. `k`/`v` may be non-contiguous slices of bigger buffers."""

    q: mx.array
    k: object  # mx.array, or a (codes, scales, biases) triple for quantized cases
    v: object
    mask: object = None  # None, "causal", or an mx.array (bool / float additive)
    key_ranges: object = None  # None, a (B, 2) integer mx.array, or a fusedattend.KeyRanges
    scale: Optional[float] = None
    dtype: object = mx.float32
    layered: bool = False
    mask_kind: str = "none"
    bits: Optional[int] = None
    group_size: Optional[int] = None
    k_float: Optional[mx.array] = None  # the float K/V a quantized case was made from
    v_float: Optional[mx.array] = None
    seed: int = 0
    info: dict = field(default_factory=dict)

    @property
    def dims(self):
        """(NL, B, H_q, H_kv, L, S, D)."""
        shp = self.q.shape if self.layered else (1,) + tuple(self.q.shape)
        NL, B, H_q, L, D = shp
        kk = self.k[0] if isinstance(self.k, tuple) else self.k
        return NL, B, H_q, kk.shape[-3], L, kk.shape[-2], D

    @property
    def dtype_name(self):
        return DTYPE_NAMES[self.dtype]

    def kwargs(self):
        kw = dict(scale=self.scale, mask=self.mask, key_ranges=self.key_ranges)
        if self.bits is not None:
            kw.update(bits=self.bits, group_size=self.group_size)
        return kw

    def np_mask(self):
        if self.mask is None or isinstance(self.mask, str):
            return self.mask
        if self.mask.dtype == mx.bool_:
            return np.array(self.mask)
        return to_np(self.mask)

    def np_key_ranges(self):
        return np_key_ranges(self.key_ranges, self.dims[5])

    def __repr__(self):
        NL, B, H_q, H_kv, L, S, D = self.dims
        mshape = None if self.mask is None or isinstance(self.mask, str) else tuple(self.mask.shape)
        return (
            f"Case(NL={NL if self.layered else '-'}, B={B}, H_q={H_q}, H_kv={H_kv}, L={L}, S={S}, "
            f"D={D}, dtype={self.dtype_name}, mask={self.mask_kind}{mshape or ''}, "
            f"key_ranges={None if self.key_ranges is None else self.np_key_ranges().tolist()}"
            f"{' (KeyRanges)' if isinstance(self.key_ranges, KeyRanges) else ''}, "
            f"scale={self.scale}, bits={self.bits}, group_size={self.group_size}, seed={self.seed}, "
            f"{self.info})"
        )


# --------------------------------------------------------------------------------------------
# building blocks


@st.composite
def shapes(draw, *, layered=None, max_B=3, max_NL=3, head_dims=HEAD_DIMS, S=None, L=None):
    """dict(NL, B, H_q, H_kv, L, S, D, layered). GQA ratio G in {1,2,4,8}; H_kv=1 gives G=H_q."""
    lay = draw(st.booleans()) if layered is None else layered
    NL = draw(st.integers(1, max_NL)) if lay else 1
    B = draw(st.integers(1, max_B))
    H_kv = draw(st.sampled_from((1, 2, 4)))
    G = draw(st.sampled_from((1, 2, 4, 8)))
    Lq = draw(st.integers(1, 8)) if L is None else L
    S_ = draw(seq_lens()) if S is None else S
    D = draw(st.sampled_from(head_dims))
    # keep the work modest: shrink D, then heads, when the product is large
    budget = 1 << 24 if wide() else 1 << 22
    while NL * B * H_kv * G * max(Lq, 1) * S_ * D > budget and D > 64 and 64 in head_dims:
        D = 64
    while NL * B * H_kv * G * max(Lq, 1) * S_ * D > budget and (G > 1 or H_kv > 1 or B > 1 or NL > 1):
        if G > 1:
            G //= 2
        elif H_kv > 1:
            H_kv //= 2
        elif B > 1:
            B -= 1
        else:
            NL -= 1
    return dict(NL=NL, B=B, H_q=H_kv * G, H_kv=H_kv, L=Lq, S=S_, D=D, layered=lay)


def mask_shapes(d, layered):
    """Array-mask shapes that broadcast to (NL,) B, H_q, L, S."""
    NL, B, H_q, L, S = d["NL"], d["B"], d["H_q"], d["L"], d["S"]
    opts = [(L, S), (B, 1, L, S), (1, 1, 1, S), (B, H_q, L, S), (1, H_q, 1, S), (S,), (B, 1, 1, S)]
    if layered:
        opts += [(NL, B, H_q, L, S), (NL, 1, 1, L, S)]
    return opts


@st.composite
def masks(draw, d, rng, *, kinds=MASK_KINDS, layered=False):
    """(mask, kind, info) for the shape dict d; masks may hide whole rows."""
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None, kind, {}
    if kind == "causal":
        return "causal", kind, {}
    shape = draw(st.sampled_from(mask_shapes(d, layered)))
    p_attend = draw(st.sampled_from((0.9, 0.5, 0.1, 1.0)))
    vis = rng.random(shape) < p_attend
    info = {"mask_shape": shape, "p": p_attend}
    if len(shape) >= 2 and draw(st.booleans()):  # hide some whole rows
        rows = vis.reshape(-1, shape[-1])
        rows[rng.integers(0, rows.shape[0], size=max(1, rows.shape[0] // 3))] = False
        info["hidden_rows"] = True
    if kind == "bool":
        return mx.array(vis), kind, info
    mdtype = draw(st.sampled_from((d["dtype"], mx.float32)))
    finite = draw(st.sampled_from(("zero", "small", "wide")))
    vals = {
        "zero": np.zeros(shape),
        "small": rng.uniform(-3.0, 1.0, size=shape),
        "wide": rng.uniform(-60.0, 8.0, size=shape),
    }[finite]
    add = np.where(vis, vals, -np.inf)
    info["additive"] = finite
    return to_mx(add, mdtype), kind, info


@st.composite
def key_ranges_for(draw, B, S, rng):
    """(B, 2) int32 or int64 of (start, length), contiguous or a strided view, or the same ranges
    as a fusedattend.KeyRanges of pairs or of padding; length 0 (nothing visible) is possible."""
    style = draw(st.sampled_from(("full", "random", "prefix", "empty_one")))
    if style == "full":
        kr = np.tile([0, S], (B, 1))
    else:
        start = rng.integers(0, S + 1, size=B)
        if style == "prefix":
            start[:] = 0
        length = np.array([rng.integers(0, S - s + 1) for s in start])
        if style == "empty_one":
            length[rng.integers(0, B)] = 0
        kr = np.stack([start, length], axis=1)
    form = draw(st.integers(0, 3))
    if form == 0:
        return KeyRanges(kr.tolist())
    if form == 1:
        return KeyRanges.from_padding(left=kr[:, 0].tolist(), right=(S - kr[:, 0] - kr[:, 1]).tolist())
    dtype = draw(st.sampled_from((mx.int32, mx.int64)))
    if draw(st.booleans()):  # a column-slice view of a wider array, junk between the columns
        wide = np.full((B, 4), -1, dtype=np.int64)
        wide[:, ::2] = kr
        return mx.array(wide).astype(dtype)[:, ::2]
    return mx.array(kr.astype(np.int64)).astype(dtype)


def np_key_ranges(key_ranges, S):
    """key_ranges (an array or a fusedattend.KeyRanges over S keys) as an int64 (B, 2) numpy
    array of (start, length); None stays None."""
    if key_ranges is None:
        return None
    if isinstance(key_ranges, KeyRanges):
        return np.array(key_ranges.pairs_for(S), dtype=np.int64)
    return np.array(key_ranges).astype(np.int64)


def request_key_ranges(key_ranges, b, S):
    """Request b's own key_ranges over S keys: an array's row b; for a KeyRanges (either form)
    request b's range as (start, length) for even b and as padding for odd b, so that the two
    words the kernels read differ between the batch and the request alone (None stays None)."""
    if isinstance(key_ranges, KeyRanges):
        start, length = key_ranges.pairs_for(S)[b]
        if b % 2 == 0:
            return KeyRanges([(start, length)])
        return KeyRanges.from_padding(left=[start], right=[S - start - length])
    return None if key_ranges is None else key_ranges[b:b + 1]


KV_LAYOUTS = ("contiguous", "cache", "transposed")


def kv_layout(x: np.ndarray, dtype, layout: str, rng) -> mx.array:
    """x as an MLX array: "contiguous"; "cache": buf[..., :S, :] of a longer preallocated buffer
    (KVCache-style); "transposed": a (..., D, S) buffer seen through swapaxes, so D is the
    strided axis."""
    if layout == "contiguous":
        return to_mx(x, dtype)
    if layout == "transposed":
        return mx.swapaxes(to_mx(np.swapaxes(x, -1, -2).copy(), dtype), -1, -2)
    S = x.shape[-2]
    cap = ((S + 255) // 256) * 256 + 256  # mlx_lm's KVCache grows in steps of 256
    buf = rng.standard_normal(x.shape[:-2] + (cap, x.shape[-1])).astype(np.float32) * 7
    buf[..., :S, :] = x
    return to_mx(buf, dtype)[..., :S, :]


def _values(rng, shape, style):
    if style == "normal":
        return rng.standard_normal(shape)
    if style == "offset":  # a large common offset: cancellation-free but big |v|
        return rng.standard_normal(shape) + 8.0
    return rng.uniform(-1.0, 1.0, shape) * 100.0  # "wide"


@st.composite
def attention_cases(
    draw,
    *,
    layered=None,
    dtypes=DTYPES,
    mask_kinds=MASK_KINDS,
    allow_key_ranges=True,
    allow_noncontig=True,
    max_B=3,
    max_NL=3,
    head_dims=HEAD_DIMS,
    S=None,
    L=None,
):
    """A plain decode_attention call (4-D or 5-D) with every knob drawn."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    d = draw(shapes(layered=layered, max_B=max_B, max_NL=max_NL, head_dims=head_dims, S=S, L=L))
    dtype = draw(st.sampled_from(dtypes))
    d["dtype"] = dtype
    lay = d["layered"]
    lead = (d["NL"], d["B"]) if lay else (d["B"],)
    qsig = draw(st.sampled_from((1.0, 0.3, 3.0)))
    vstyle = draw(st.sampled_from(("normal", "offset", "wide")))
    q = to_mx(rng.standard_normal(lead + (d["H_q"], d["L"], d["D"])) * qsig, dtype)
    kn = rng.standard_normal(lead + (d["H_kv"], d["S"], d["D"]))
    vn = _values(rng, lead + (d["H_kv"], d["S"], d["D"]), vstyle)
    layout = draw(st.sampled_from(KV_LAYOUTS)) if allow_noncontig else "contiguous"
    k = kv_layout(kn, dtype, layout, rng)
    v = kv_layout(vn, dtype, layout, rng)
    mask, kind, info = draw(masks(d, rng, kinds=mask_kinds, layered=lay))
    kr = None
    if allow_key_ranges and draw(st.integers(0, 3)) == 0:
        kr = draw(key_ranges_for(d["B"], d["S"], rng))
    scale = draw(st.sampled_from((None, None, 0.5, 1.0 / 3.0, 2)))
    info.update(layout=layout, v=vstyle, qsig=qsig)
    return Case(q, k, v, mask, kr, scale, dtype, lay, kind, seed=seed, info=info)


@st.composite
def quant_params(draw, head_dims=HEAD_DIMS):
    """(bits, group_size, D) with group_size dividing D."""
    bits = draw(st.sampled_from(BITS))
    gs = draw(st.sampled_from(GROUP_SIZES))
    D = draw(st.sampled_from([D for D in head_dims if D % gs == 0]))
    return bits, gs, D


QUANTIZED_LAYOUTS = ("contiguous", "cache", "strided")


def quantized_layout(arrays, layout: str, rng):
    """(codes, scales, biases) as a caller may pass them. "contiguous": as mx.quantize returns
    them. "cache": slices [..., :S, :] of buffers with room for more keys, as mlx_lm's
    QuantizedKVCache keeps them, NaN scales and biases and random codes past S. "strided": the
    codes' words S apart (a transposed buffer) and the biases' rows one group longer than the
    scales': the GPU's 32-bit offsets (fa_narrow_rows) do not cover these, so they take its
    64-bit path."""
    if layout == "contiguous":
        return tuple(arrays)
    codes, scales, biases = arrays
    if layout == "strided":
        codes = mx.swapaxes(mx.contiguous(mx.swapaxes(codes, -1, -2)), -1, -2)
        pad = mx.full(biases.shape[:-1] + (1,), float("nan"), dtype=biases.dtype)
        return codes, scales, mx.concatenate([biases, pad], axis=-1)[..., :-1]
    S = codes.shape[-2]
    cap = ((S + 255) // 256) * 256 + 256

    def with_room(x):
        shape = x.shape[:-2] + (cap - S, x.shape[-1])
        if x.dtype == mx.uint32:
            junk = mx.array(rng.integers(0, 2**32, shape, dtype=np.uint32))
        else:
            junk = mx.full(shape, float("nan"), dtype=x.dtype)
        return mx.concatenate([x, junk], axis=-2)[..., :S, :]

    return tuple(with_room(x) for x in arrays)


@st.composite
def quantized_cases(draw, *, layered=None, dtypes=DTYPES, mask_kinds=MASK_KINDS, allow_key_ranges=True, S=None, L=None):
    """A quantized_decode_attention call; K/V quantized with mx.quantize from float K/V, in one
    of QUANTIZED_LAYOUTS."""
    bits, gs, D = draw(quant_params())
    case = draw(
        attention_cases(
            layered=layered, dtypes=dtypes, mask_kinds=mask_kinds, allow_key_ranges=allow_key_ranges,
            head_dims=(D,), allow_noncontig=False, S=S, L=L,
        )
    )
    layout = draw(st.sampled_from(QUANTIZED_LAYOUTS))
    rng = np.random.default_rng(case.seed)
    kq = quantized_layout(mx.quantize(case.k, group_size=gs, bits=bits), layout, rng)
    vq = quantized_layout(mx.quantize(case.v, group_size=gs, bits=bits), layout, rng)
    return replace(case, k=kq, v=vq, bits=bits, group_size=gs, k_float=case.k, v_float=case.v,
                   info={**case.info, "layout": layout})


@st.composite
def quantizable_arrays(draw):
    """(x, bits, group_size): a float array whose last axis group_size divides."""
    bits, gs, D = draw(quant_params())
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    style = draw(st.sampled_from(("normal", "offset", "wide", "const")))
    if style == "const":
        x = np.full(lead + (D,), float(rng.standard_normal()))
    else:
        x = _values(rng, lead + (D,), style)
    return to_mx(x, dtype), bits, gs


# --------------------------------------------------------------------------------------------
# pinned edges: built without Hypothesis, run by every test that lists them with @example.
# They sit on the schedule boundaries of the kernels (fusedattend.gpu: key blocks of 256..1024,
# 8 query rows a threadgroup, lanes past D for D = 80; fusedattend.cpu: 1024-key blocks) and on
# the edges the issue names: S = 1, powers of two +- 1, fully masked rows, GQA ratio = H_q, NL = 1.


def edge_case(*, NL=1, B=2, H_q=8, H_kv=2, L=1, S=129, D=128, dtype=mx.bfloat16, layered=False,
              mask="none", key_ranges=None, noncontig=True, bits=None, group_size=None, layout="contiguous",
              seed=0):
    """A deterministic Case; mask "bool_hidden_row" hides query row 0 of every head from all keys."""
    rng = np.random.default_rng(seed)
    lead = (NL, B) if layered else (B,)
    q = to_mx(rng.standard_normal(lead + (H_q, L, D)), dtype)
    kn = rng.standard_normal(lead + (H_kv, S, D))
    vn = rng.standard_normal(lead + (H_kv, S, D))
    kv = "cache" if noncontig and bits is None else "contiguous"
    k, v = kv_layout(kn, dtype, kv, rng), kv_layout(vn, dtype, kv, rng)
    kind, m = mask, None
    if mask == "causal":
        m = "causal"
    elif mask == "bool_hidden_row":
        vis = rng.random((L, S)) < 0.6
        vis[0] = False
        kind, m = "bool", mx.array(vis)
    elif mask == "additive":
        m = to_mx(np.where(rng.random((L, S)) < 0.7, rng.uniform(-3.0, 0.0, (L, S)), -np.inf), dtype)
    kr = key_ranges
    if key_ranges is not None and not isinstance(key_ranges, KeyRanges):
        kr = mx.array(np.array(key_ranges, dtype=np.int32))
    case = Case(q, k, v, m, kr, None, dtype, layered, kind, seed=seed, info={"pinned": True})
    if bits is None:
        return case
    kq = quantized_layout(mx.quantize(k, group_size=group_size, bits=bits), layout, rng)
    vq = quantized_layout(mx.quantize(v, group_size=group_size, bits=bits), layout, rng)
    return replace(case, k=kq, v=vq, bits=bits, group_size=group_size, k_float=k, v_float=v,
                   info={**case.info, "layout": layout})


def pinned_cases():
    """Plain 4-D edges."""
    return [
        edge_case(S=1, H_q=8, H_kv=1),                                        # S = 1, G = H_q
        edge_case(S=129, L=8, H_q=8, H_kv=1, mask="bool_hidden_row"),        # 64 rows: 8 tiles
        edge_case(S=1025, D=80, mask="causal", key_ranges=[[0, 1025], [1000, 0]]),  # empty range
        edge_case(B=1, S=4097, D=256, dtype=mx.float16, mask="additive"),    # 2^12 + 1 keys
    ]


def pinned_layered_cases():
    """5-D edges: NL = 1 and a multi-layer call over a block boundary."""
    return [
        edge_case(NL=1, S=127, layered=True, mask="causal"),
        edge_case(NL=3, B=2, S=1024, L=3, layered=True, dtype=mx.float32),
    ]


def pinned(cases):
    """@example(case=c) for every c in `cases` (each test reuses the built arrays)."""
    from hypothesis import example

    def decorate(test):
        for case in reversed(cases):
            test = example(case=case)(test)
        return test

    return decorate


def pinned_quantized_cases():
    return [
        edge_case(S=129, D=64, mask="causal", bits=2, group_size=32),
        edge_case(S=1025, H_q=4, H_kv=4, bits=8, group_size=128, key_ranges=[[3, 1000], [0, 1]]),
        edge_case(S=130, D=64, bits=4, group_size=32, layout="cache", mask="bool_hidden_row"),
        edge_case(S=130, bits=4, group_size=64, layout="strided", key_ranges=KeyRanges([(5, 120), (0, 130)])),
        cancelling_case(),
        climbing_case(),
    ]


def packed_codes4(codes):
    """(S, D) 4-bit codes -> (1, 1, S, D / 8) uint32 words as mx.quantize packs them (element i at
    bits 4 i), for cases built from their codes."""
    c = codes.reshape(codes.shape[0], -1, 8).astype(np.uint32)
    return mx.array((c << (4 * np.arange(8, dtype=np.uint32))).sum(-1).astype(np.uint32))[None, None]


def cancelling_case(q_scale=0.02, D=64, seed=0):
    """4-bit K/V of two keys whose V rows cancel exactly (codes c and 15 - c, scale 1/8, bias
    -15/16, all exact in bf16), small bf16 queries (nearly equal weights): the output is near 0,
    where the parity bound is its float32 part alone, so the output's weights need float's
    accuracy (two bf16 parts of them broke it; commit d205b41: docs/h200/journal.md)."""
    rng = np.random.default_rng(seed)

    def params(scale, bias):
        return mx.full((1, 1, 2, 1), scale, dtype=mx.bfloat16), mx.full((1, 1, 2, 1), bias, dtype=mx.bfloat16)

    c0 = rng.integers(0, 16, size=D)
    k = (packed_codes4(rng.integers(0, 16, size=(2, D))), *params(0.01, 0.0))
    v = (packed_codes4(np.stack([c0, 15 - c0])), *params(0.125, -0.9375))
    q = to_mx(np.random.default_rng(seed + 1).standard_normal((1, 8, 1, D)) * q_scale, mx.bfloat16)
    return Case(q, k, v, dtype=mx.bfloat16, bits=4, group_size=64, seed=seed,
                info={"pinned": True, "cancelling": q_scale})


def climbing_case(S=300, D=64, seed=0):
    """4-bit K/V whose scores climb from tile to tile of 16 keys, then level off: each query row's
    max passes the one before by steps that alternate around 8 (base 2: 7.5 and 8.5 times the
    row's query, 0.5 to 1.25), so that a kernel's running max moves by more and by less than a
    factor 2^8 from tile to tile, in one block and across blocks, and the last tiles' scores sit
    just under the max (many weights near 1). K is a code of 15 in dim 0 only, with a scale per
    key; V random codes."""
    rng = np.random.default_rng(seed)
    tiles = -(-S // 16)
    steps = np.where(np.arange(tiles) % 2 == 1, 7.5, 8.5)
    steps[0] = 0.0
    top = np.cumsum(steps)
    top[14:] = top[min(13, tiles - 1)] - 0.25  # level: the max stays where it is
    levels = (top[:, None] - 0.5 * (15 - np.arange(16))[None, :]).reshape(-1)[:S]  # base 2, row of query 1
    k_scale = levels / (15 * D ** -0.5 * math.log2(math.e))
    k_codes = np.zeros((S, D), dtype=np.int64)
    k_codes[:, 0] = 15
    k = (packed_codes4(k_codes), to_mx(k_scale.reshape(1, 1, S, 1), mx.bfloat16),
         mx.zeros((1, 1, S, 1), dtype=mx.bfloat16))
    v = (packed_codes4(rng.integers(0, 16, size=(S, D))), mx.full((1, 1, S, 1), 0.1, dtype=mx.bfloat16),
         mx.full((1, 1, S, 1), -0.75, dtype=mx.bfloat16))
    q = np.zeros((1, 4, 1, D))
    q[0, :, 0, 0] = [1.0, 0.75, 1.25, 0.5]
    return Case(to_mx(q, mx.bfloat16), k, v, dtype=mx.bfloat16, bits=4, group_size=64, seed=seed,
                info={"pinned": True, "climbing": S})


def block_edge_tiles(block, S):
    """(first, last): boolean masks over S keys of the first and the last tile of 16 keys of
    every block of `block` keys, the last block ending at S."""
    first, last = np.zeros(S, dtype=bool), np.zeros(S, dtype=bool)
    for lo in range(0, S, block):
        hi = min(lo + block, S)
        first[lo:lo + 16] = True
        last[max(lo, hi - 16):hi] = True
    return first, last


def block_edge_case(block, S, D=32, H_q=8, H_kv=2, B=2, seed=0, bits=None, group_size=64):
    """Plain bf16 K/V whose keys at the blocks' edges (block_edge_tiles) carry a third of every
    row's weight whatever S and D (more where few keys lie between edges), and a V of their own:
    about +2 in a block's last tile, -2 in its first. A block that drops or repeats such keys is
    off by several times the parity tolerance
    (tests/kernels/test_gpu_schedule.py::test_lost_edge_tiles_fail), where random keys would
    each weigh 1 / S. With `bits`: those K/V through mx.quantize (the oracle reads them
    dequantized)."""
    rng = np.random.default_rng(seed)
    first, last = block_edge_tiles(block, S)
    edge = first | last
    n_edge = int(edge.sum())
    # An edge key's weight w against about 1 for the others: n_edge * w = (S - n_edge) / 2
    # (the scores q.k ~ |u|^2 are scaled by 1/sqrt(D)).
    log_w = max(math.log(max(1.0, 0.5 * (S - n_edge) / n_edge)), 2.0)
    u = rng.standard_normal(D)
    u *= math.sqrt(log_w * math.sqrt(D)) / np.linalg.norm(u)
    q = u + 0.1 * rng.standard_normal((B, H_q, 1, D))
    k = 0.3 * rng.standard_normal((B, H_kv, S, D))
    k[:, :, edge] = u + 0.1 * rng.standard_normal((B, H_kv, n_edge, D))
    v = 0.3 * rng.standard_normal((B, H_kv, S, D))
    v[:, :, last & ~first] += 2.0
    v[:, :, first & ~last] -= 2.0
    q, k, v = to_mx(q, mx.bfloat16), to_mx(k, mx.bfloat16), to_mx(v, mx.bfloat16)
    info = {"pinned": True, "block_edges": block}
    if bits is None:
        return Case(q, k, v, dtype=mx.bfloat16, seed=seed, info=info)
    kq, vq = (tuple(mx.quantize(x, group_size=group_size, bits=bits)) for x in (k, v))
    return Case(q, kq, vq, dtype=mx.bfloat16, bits=bits, group_size=group_size, k_float=k, v_float=v,
                seed=seed, info=info)


# --------------------------------------------------------------------------------------------
# helpers shared by the property tests (not strategies, but they belong with the Case type)


def run_case(case: Case, backend, **override):
    """Call the package on `case` (quantized entry point when case.bits is set)."""
    import fusedattend as fa

    kw = case.kwargs()
    q = override.pop("q", case.q)
    k = override.pop("k", case.k)
    v = override.pop("v", case.v)
    kw.update(override)
    if case.bits is not None:
        return fa.quantized_decode_attention(q, k, v, backend=backend, **kw)
    return fa.decode_attention(q, k, v, backend=backend, **kw)


def np_kv(case: Case):
    """float64-exact numpy K and V (dequantized in float64 for quantized cases)."""
    from fusedattend.conformance import oracle

    if case.bits is None:
        return to_np(case.k), to_np(case.v)
    deq = [
        oracle.dequantize(*(np.array(a.astype(mx.float32)) if a.dtype != mx.uint32 else np.array(a) for a in t),
                          bits=case.bits, group_size=case.group_size)
        for t in (case.k, case.v)
    ]
    return deq[0], deq[1]


_SAME = object()


def oracle_of(case: Case, *, mask=_SAME, key_ranges=_SAME):
    """(out, stats) of fusedattend/conformance/oracle.py on the case's exact (rounded) inputs."""
    from fusedattend.conformance import oracle

    k, v = np_kv(case)
    return oracle.attention(
        to_np(case.q), k, v, scale=case.scale,
        mask=case.np_mask() if mask is _SAME else mask,
        key_ranges=case.np_key_ranges() if key_ranges is _SAME else key_ranges,
        stats=True,
    )


# --------------------------------------------------------------------------------------------
# invalid calls


@dataclass
class InvalidCall:
    """One call that must raise `exc` with a message matching `names` (the argument's name)."""

    what: str
    fn: str  # "decode_attention", "quantized_decode_attention", "quantize_kv", "dequantize_kv"
    args: tuple
    kwargs: dict
    exc: tuple
    names: str  # regex the message must match

    def __repr__(self):
        def sh(a):
            if isinstance(a, mx.array):
                return f"array{tuple(a.shape)}:{a.dtype}"
            if isinstance(a, tuple):
                return "(" + ", ".join(sh(x) for x in a) + ")"
            return repr(a)
        return (f"InvalidCall({self.what}: {self.fn}({', '.join(sh(a) for a in self.args)}, "
                f"{ {k: sh(v) for k, v in self.kwargs.items()} }) -> {[e.__name__ for e in self.exc]} /{self.names}/)")


PLAIN_CORRUPTIONS = (
    "q_ndim", "k_ndim", "v_ndim", "k_batch", "v_batch", "k_layers", "v_layers", "heads_not_multiple",
    "kv_heads_differ", "kv_S_differ", "k_D", "v_D", "unsupported_D", "L0", "S0", "mask_no_broadcast",
    "mask_int", "mask_string", "mask_list", "mask_ndim6", "mixed_dtype", "int_queries", "np_queries",
    "list_keys", "np_values", "kr_shape", "kr_rows", "kr_negative", "kr_past_end", "kr_float", "kr_list",
    "kr_object_rows", "kr_object_past_end", "kr_padding_past_end",
    "scale_str", "scale_bool", "scale_list", "scale_nan", "backend_unknown", "backend_type",
    "backend_unavailable",
)
QUANT_CORRUPTIONS = (
    "bits_refused", "bits_other", "bits_type", "gs_other", "gs_type", "codes_for_other_bits",
    "scales_for_other_gs", "gs_not_dividing_D", "keys_not_triple", "codes_dtype", "scales_int",
    "scales_biases_differ", "q_values_batch", "q_S_differ", "q_heads_not_multiple",
)
QKV_CORRUPTIONS = ("qkv_bits", "qkv_gs", "qkv_type", "qkv_int", "qkv_1d", "qkv_indivisible", "qkv_gs_type")
DQKV_CORRUPTIONS = ("dq_bits", "dq_codes_dtype", "dq_sb_shapes", "dq_lead_axes", "dq_last_axis", "dq_type")


def _valid_base(draw, rng, layered):
    B = draw(st.integers(1, 2))
    NL = draw(st.integers(1, 2))
    H_kv = draw(st.sampled_from((1, 2)))
    G = draw(st.sampled_from((1, 2, 4)))
    L = draw(st.integers(1, 3))
    S = draw(st.integers(1, 9))
    D = draw(st.sampled_from((32, 64, 128)))
    dtype = draw(st.sampled_from(DTYPES))
    lead = (NL, B) if layered else (B,)
    q = to_mx(rng.standard_normal(lead + (H_kv * G, L, D)), dtype)
    k = to_mx(rng.standard_normal(lead + (H_kv, S, D)), dtype)
    v = to_mx(rng.standard_normal(lead + (H_kv, S, D)), dtype)
    return dict(B=B, NL=NL, H_kv=H_kv, H_q=H_kv * G, L=L, S=S, D=D, dtype=dtype, lead=lead), q, k, v


def _resize(x, axis, n, rng):
    shape = list(x.shape)
    shape[axis] = n
    return to_mx(rng.standard_normal(shape), x.dtype)


FAMILIES = {"plain": PLAIN_CORRUPTIONS, "quant": QUANT_CORRUPTIONS, "qkv": QKV_CORRUPTIONS, "dqkv": DQKV_CORRUPTIONS}


@st.composite
def invalid_calls(draw, kind=None):
    """A call with exactly one invalid argument, and what it must raise. `kind` forces one
    corruption kind (see the *_CORRUPTIONS tuples)."""
    import fusedattend as fa

    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if kind is None:
        family = draw(st.sampled_from(tuple(FAMILIES)))
    else:
        family = next(f for f, kinds in FAMILIES.items() if kind in kinds)

    def pick(kinds):
        return kind if kind is not None else draw(st.sampled_from(kinds))

    layered = draw(st.booleans())
    d, q, k, v = _valid_base(draw, rng, layered)
    VE, TE = (ValueError,), (TypeError,)
    nd = q.ndim
    kw = {}

    if family == "plain":
        what = pick(PLAIN_CORRUPTIONS)
        exc, names = VE, None
        if what == "q_ndim":
            q = q.reshape((1,) * (6 - nd) + tuple(q.shape)) if draw(st.booleans()) else q[0]
            names = "queries"
        elif what in ("k_ndim", "v_ndim"):
            x = k if what == "k_ndim" else v
            x = x[0] if draw(st.booleans()) else mx.expand_dims(x, 0)
            k, v = (x, v) if what == "k_ndim" else (k, x)
            names = "keys" if what == "k_ndim" else "values"
        elif what in ("k_batch", "v_batch"):
            ax = nd - 4
            if what == "k_batch":
                k = _resize(k, ax, d["B"] + 1, rng)
            else:
                v = _resize(v, ax, d["B"] + 1, rng)
            names = "keys" if what == "k_batch" else "values"
        elif what in ("k_layers", "v_layers"):
            if not layered:
                q, k, v = mx.expand_dims(q, 0), mx.expand_dims(k, 0), mx.expand_dims(v, 0)
            if what == "k_layers":
                k = mx.concatenate([k, k], axis=0)
            else:
                v = mx.concatenate([v, v], axis=0)
            names = "keys" if what == "k_layers" else "values"
        elif what == "heads_not_multiple":
            H = d["H_q"] + 1 if d["H_q"] > 1 else 2  # H_q % H != 0
            k, v = _resize(k, nd - 3, H, rng), _resize(v, nd - 3, H, rng)
            names = "keys"
        elif what == "kv_heads_differ":
            if d["H_q"] == 1:
                q = _resize(q, nd - 3, 2, rng)
            H_q = q.shape[nd - 3]
            other = 1 if k.shape[nd - 3] != 1 else H_q
            v = _resize(v, nd - 3, other, rng)
            names = "keys|values"
        elif what == "kv_S_differ":
            v = _resize(v, nd - 2, d["S"] + 1, rng)
            names = "keys|values"
        elif what == "k_D":
            k = _resize(k, nd - 1, d["D"] // 2, rng)
            names = "keys"
        elif what == "v_D":
            v = _resize(v, nd - 1, d["D"] * 2, rng)
            names = "values"
        elif what == "unsupported_D":
            D = draw(st.sampled_from((4, 12, 100, 264, 512, 0)))
            q, k, v = (_resize(x, nd - 1, D, rng) for x in (q, k, v))
            names = r"\bD\b|queries"
        elif what == "L0":
            q = q[..., :0, :]
            names = "queries|L"
        elif what == "S0":
            k, v = k[..., :0, :], v[..., :0, :]
            names = "keys"
        elif what == "mask_no_broadcast":
            bad = draw(st.sampled_from(("S+1", "L+1", "B+1")))
            L, S, B = d["L"], d["S"], d["B"]
            shape = {"S+1": (L, S + 1), "L+1": (L + 1, S), "B+1": (B + 1, 1, L, S)}[bad]
            kw["mask"] = mx.array(rng.random(shape) < 0.5)
            names = "mask"
        elif what == "mask_int":
            kw["mask"] = mx.array(rng.integers(0, 2, (d["L"], d["S"]))).astype(
                draw(st.sampled_from((mx.int32, mx.uint8, mx.int64)))
            )
            exc, names = TE, "mask"
        elif what == "mask_string":
            kw["mask"] = draw(st.sampled_from(("Causal", "causal ", "none", "", "bool", "upper")))
            names = "mask"
        elif what == "mask_list":
            kw["mask"] = [[True] * d["S"]] * d["L"]
            exc, names = TE, "mask"
        elif what == "mask_ndim6":
            kw["mask"] = mx.ones((1, 1, 1, 1, d["L"], d["S"]), dtype=mx.bool_)
            names = "mask"
        elif what == "mixed_dtype":
            others = [t for t in DTYPES if t != d["dtype"]]
            which = draw(st.sampled_from(("k", "v", "kv")))
            t = draw(st.sampled_from(others))
            if "k" in which:
                k = k.astype(t)
            if "v" in which:
                v = v.astype(t)
            exc, names = TE, "keys|values"
        elif what == "int_queries":
            q = q.astype(mx.int32)
            exc, names = TE, "queries"
        elif what == "np_queries":
            q = to_np(q)
            exc, names = TE, "queries"
        elif what == "list_keys":
            k = to_np(k).tolist()
            exc, names = TE, "keys"
        elif what == "np_values":
            v = to_np(v)
            exc, names = TE, "values"
        elif what.startswith("kr_"):
            B, S = d["B"], d["S"]
            good = np.tile([0, S], (B, 1))
            if what == "kr_shape":
                kw["key_ranges"] = mx.array(np.zeros((B, 3), dtype=np.int32))
            elif what == "kr_rows":
                kw["key_ranges"] = mx.array(np.tile([0, S], (B + 1, 1)).astype(np.int32))
            elif what == "kr_negative":
                bad = good.copy()
                bad[rng.integers(0, B), draw(st.integers(0, 1))] = -draw(st.integers(1, 5))
                kw["key_ranges"] = mx.array(bad.astype(np.int32))
            elif what == "kr_past_end":
                bad = good.copy()
                bad[rng.integers(0, B)] = [draw(st.integers(0, S)), S + 1]
                kw["key_ranges"] = mx.array(bad.astype(np.int32))
            elif what == "kr_object_rows":  # a KeyRanges of another batch
                kw["key_ranges"] = KeyRanges(np.tile([0, S], (B + 1, 1)))
            elif what == "kr_object_past_end":  # valid as made, one key past this call's S
                bad = good.copy()
                start = draw(st.integers(0, S + 1))
                bad[rng.integers(0, B)] = [start, S + 1 - start]
                kw["key_ranges"] = KeyRanges(bad)
            elif what == "kr_padding_past_end":  # valid as made, more padding than this call's S
                left = draw(st.integers(0, S + 1))
                pads = np.zeros((2, B), dtype=np.int64)
                pads[:, rng.integers(0, B)] = [left, S + 1 - left]
                kw["key_ranges"] = KeyRanges.from_padding(left=pads[0], right=pads[1])
            elif what == "kr_float":
                kw["key_ranges"] = mx.array(good.astype(np.float32))
                exc = TE
            else:
                kw["key_ranges"] = good.tolist()
                exc = TE
            names = "key_ranges"
        elif what.startswith("scale_"):
            kw["scale"] = {"scale_str": "0.125", "scale_bool": True, "scale_list": [0.5],
                           "scale_nan": draw(st.sampled_from((float("nan"), float("inf"), -float("inf"),
                                                               -1e39, 10**400)))}[what]
            exc = VE if what == "scale_nan" else TE
            names = "scale"
        elif what == "backend_unknown":
            kw["backend"] = draw(st.sampled_from(("nope", "gpu", "Reference", "", "mps", "cuda0")))
            names = "backend"
        elif what == "backend_type":
            kw["backend"] = draw(st.sampled_from((0, 1.5, ["reference"], b"reference")))
            exc, names = TE, "backend"
        elif what == "backend_unavailable":
            missing = [n for n in fa.BACKENDS if n not in fa.available_backends()]
            kw["backend"] = draw(st.sampled_from(missing)) if missing else "definitely-not-a-backend"
            names = "backend"
        return InvalidCall(what, "decode_attention", (q, k, v), kw, exc, names)

    if family == "quant":
        bits, gs, D = draw(quant_params(head_dims=(64, 128)))
        if D != d["D"]:
            q, k, v = (_resize(x, nd - 1, D, rng) for x in (q, k, v))
        kq = tuple(mx.quantize(k, group_size=gs, bits=bits))
        vq = tuple(mx.quantize(v, group_size=gs, bits=bits))
        kw = dict(bits=bits, group_size=gs)
        what = pick(QUANT_CORRUPTIONS)
        exc, names = VE, None
        if what == "bits_refused":
            kw["bits"] = draw(st.sampled_from((3, 5, 6)))
            names = "bits"
        elif what == "bits_other":
            kw["bits"] = draw(st.sampled_from((1, 7, 16, 0, -4, 32)))
            names = "bits"
        elif what == "bits_type":
            kw["bits"] = draw(st.sampled_from((4.0, "4", None, True)))
            exc, names = TE, "bits"
        elif what == "gs_other":
            kw["group_size"] = draw(st.sampled_from((16, 256, 48, 0, -64, 1)))
            names = "group_size"
        elif what == "gs_type":
            kw["group_size"] = draw(st.sampled_from((64.0, "64", None)))
            exc, names = TE, "group_size"
        elif what == "codes_for_other_bits":
            kw["bits"] = draw(st.sampled_from([b for b in BITS if b != bits]))
            names = "keys|values|bits"
        elif what == "scales_for_other_gs":
            other = [g for g in GROUP_SIZES if g != gs and D % g == 0]
            if not other:
                other = [32]
            kw["group_size"] = draw(st.sampled_from(other))
            names = "keys|values|group_size"
        elif what == "gs_not_dividing_D":
            q, k, v = (_resize(x, nd - 1, 96, rng) for x in (q, k, v))
            kq = tuple(mx.quantize(k, group_size=32, bits=bits))
            vq = tuple(mx.quantize(v, group_size=32, bits=bits))
            kw["group_size"] = 64
            names = "group_size"
        elif what == "keys_not_triple":
            kq = draw(st.sampled_from(("array", "pair")))
            kq = k if kq == "array" else (kq_ := tuple(mx.quantize(k, group_size=gs, bits=bits)))[:2]
            exc, names = TE, "keys"
        elif what == "codes_dtype":
            vq = (vq[0].astype(mx.int32),) + vq[1:]
            exc, names = TE, "values"
        elif what == "scales_int":
            kq = (kq[0], kq[1].astype(mx.int32), kq[2])
            exc, names = TE, "keys"
        elif what == "scales_biases_differ":
            kq = (kq[0], kq[1], mx.concatenate([kq[2], kq[2]], axis=-2))
            names = "keys"
        elif what == "q_values_batch":
            vq = tuple(mx.concatenate([a, a], axis=nd - 4) for a in vq)
            names = "values"
        elif what == "q_S_differ":
            vq = tuple(mx.concatenate([a, a[..., :1, :]], axis=nd - 2) for a in vq)
            names = "keys|values"
        elif what == "q_heads_not_multiple":
            H = d["H_q"] + 1 if d["H_q"] > 1 else 2
            k2 = _resize(k, nd - 3, H, rng)
            kq = vq = tuple(mx.quantize(k2, group_size=gs, bits=bits))
            names = "keys"
        return InvalidCall(what, "quantized_decode_attention", (q, kq, vq), kw, exc, names)

    if family == "qkv":
        what = pick(QKV_CORRUPTIONS)
        x = k
        kw = dict(bits=4, group_size=32)
        exc, names = VE, None
        if what == "qkv_bits":
            kw["bits"] = draw(st.sampled_from((3, 5, 6, 1, 7, 16)))
            names = "bits"
        elif what == "qkv_gs":
            kw["group_size"] = draw(st.sampled_from((16, 256, 0)))
            names = "group_size"
        elif what == "qkv_gs_type":
            kw["group_size"] = 32.0
            exc, names = TE, "group_size"
        elif what == "qkv_type":
            x = to_np(x)
            exc, names = TE, r"\bx\b"
        elif what == "qkv_int":
            x = x.astype(mx.int32)
            exc, names = TE, r"\bx\b"
        elif what == "qkv_1d":
            x = x.reshape(-1)[:64]
            names = r"\bx\b"
        else:
            x = _resize(x, x.ndim - 1, 40, rng)
            names = r"group_size|\bx\b"
        return InvalidCall(what, "quantize_kv", (x,), kw, exc, names)

    codes, scales, biases = mx.quantize(k, group_size=32, bits=4)
    kw = dict(bits=4, group_size=32)
    what = pick(DQKV_CORRUPTIONS)
    exc, names = VE, None
    if what == "dq_bits":
        kw["bits"] = draw(st.sampled_from((3, 5, 6, 1, 7, 16)))
        names = "bits"
    elif what == "dq_codes_dtype":
        codes = codes.astype(mx.int32)
        exc, names = TE, "codes"
    elif what == "dq_sb_shapes":
        biases = mx.concatenate([biases, biases], axis=-1)
        names = "scales|biases"
    elif what == "dq_lead_axes":
        codes = mx.concatenate([codes, codes], axis=-2)
        names = "codes|scales"
    elif what == "dq_last_axis":
        kw["bits"] = 8
        names = "codes|bits|group_size"
    else:
        scales = to_np(scales)
        exc, names = TE, "scales"
    return InvalidCall(what, "dequantize_kv", (codes, scales, biases), kw, exc, names)
