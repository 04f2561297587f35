"""Conformance cases: a small frozen `Spec` (structure and a seed) and the arrays `build` makes of it.

    c = build(Spec(B=2, H_q=8, H_kv=2, L=1, S=129, D=128, dtype="bfloat16", mask="causal", seed=7))
    expected, stats = oracle_of(c)          # float64, fusedattend.conformance.oracle

The arrays follow from the Spec alone (numpy's RNG seeded by `seed`), so a failing example is
replayed from its printed Spec. Hypothesis draws Specs (`specs`) inside what the kernel supports;
`pinned` lists the fixed ones every profile runs: the tiny-llm Week 2 decode grid (D = 128,
L in {1, 8}, GQA in {1, 4}, S in {1, 31, 32, 127, 128, 129, 255, 256}) and the layer-axis
layouts (NL in {1, 4, 32}; NL = 3 with B = 2, where swapped layer and request strides show).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import numpy as np

from . import oracle

DTYPE_PREFERENCE = ("float32", "bfloat16", "float16")
LARGE = {"float32": 1e30, "bfloat16": 1e30, "float16": 3e4}  # finite in the dtype


@dataclass(frozen=True)
class Spec:
    B: int
    H_q: int
    H_kv: int
    L: int
    S: int
    D: int
    dtype: str = "float32"
    mask: str = "none"  # none, causal, bool, additive
    mask_heads: bool = False  # an array mask per query head (B, H_q, L, S), else (B, 1, L, S)
    holes: bool = False  # key columns hidden from every row (garbage may sit there)
    masked_row: bool = False  # one row sees no key
    NL: int = 0  # 0: 4-D arrays; else a layer axis of NL in front
    key_ranges: bool = False
    bits: int = 0  # 0: plain K/V; else mx.quantize'd with group_size
    group_size: int = 0
    amp: float = 1.0  # queries scaled by amp: larger gives peakier softmax rows
    seed: int = 0

    def __repr__(self):
        base = Spec(1, 1, 1, 1, 1, 1)
        parts = [f"{n}={getattr(self, n)!r}" for n in self.__dataclass_fields__
                 if n in ("B", "H_q", "H_kv", "L", "S", "D", "seed") or getattr(self, n) != getattr(base, n)]
        return f"Spec({', '.join(parts)})"


@dataclass
class Case:
    spec: Spec
    q: object
    k: object  # mx.array, or (codes, scales, biases)
    v: object
    mask: object  # None, "causal" or an mx.array
    key_ranges: object  # None or an int32 (B, 2) mx.array: (start, length) a request
    scale: float
    k_float: object = None  # the float K/V a quantized case was quantized from
    v_float: object = None

    @property
    def dtype_name(self):
        return self.spec.dtype

    @property
    def layered(self):
        return self.spec.NL > 0

    def np_mask(self):
        return np_mask(self.mask)

    def np_key_ranges(self):
        """The key ranges as an int64 (B, 2) numpy array of (start, length), or None. A caller
        whose kernel takes key ranges in another form (an object) overrides this."""
        return None if self.key_ranges is None else np.array(self.key_ranges).astype(np.int64)

    def request_key_ranges(self, b):
        """Request b's own key ranges, for a call of that request alone (None stays None)."""
        return None if self.key_ranges is None else self.key_ranges[b:b + 1]


def np_mask(mask):
    import mlx.core as mx

    if mask is None or isinstance(mask, str):
        return mask
    return np.array(mask) if mask.dtype == mx.bool_ else to_np(mask)


def to_np(x):
    """MLX array -> float64 numpy (exact for f16/bf16/f32); other dtypes as they are."""
    import mlx.core as mx

    if x.dtype in (mx.float32, mx.float16, mx.bfloat16):
        return np.array(x.astype(mx.float32)).astype(np.float64)
    return np.array(x)


def dtype_name(x):
    """The name of an MLX float array's dtype ("float32", "float16", "bfloat16")."""
    import mlx.core as mx

    return {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}[x.dtype]


def to_mx(a, dtype_name):
    import mlx.core as mx

    return mx.array(np.asarray(a, dtype=np.float32)).astype(getattr(mx, dtype_name))


def visibility(spec, mask_np, key_ranges_np):
    """(NL or 1, B, H_q, L, S) boolean: which key each query row sees."""
    NL = max(spec.NL, 1)
    return oracle.visibility((NL, spec.B, spec.H_q, spec.L, spec.D), spec.S, mask_np, key_ranges_np)


def build(spec: Spec) -> Case:
    import mlx.core as mx

    rng = np.random.default_rng(spec.seed)
    lead = (spec.NL,) if spec.NL else ()
    B, H_q, H_kv, L, S, D = spec.B, spec.H_q, spec.H_kv, spec.L, spec.S, spec.D
    q = to_mx(spec.amp * rng.standard_normal(lead + (B, H_q, L, D)), spec.dtype)
    kf = to_mx(rng.standard_normal(lead + (B, H_kv, S, D)), spec.dtype)
    vf = to_mx(rng.standard_normal(lead + (B, H_kv, S, D)), spec.dtype)
    mask = None
    if spec.mask == "causal":
        mask = "causal"
    elif spec.mask in ("bool", "additive"):
        vis = rng.random((B, H_q if spec.mask_heads else 1, L, S)) < 0.8
        if spec.holes and S > 1:
            vis[..., rng.random(S) < 0.3] = False
        rows = vis.reshape(-1, S)
        rows[np.arange(rows.shape[0]), rng.integers(0, S, rows.shape[0])] = True  # every row sees a key
        if spec.masked_row:
            rows[rng.integers(0, rows.shape[0])] = False
        if spec.mask == "bool":
            mask = mx.array(vis)
        else:
            add = np.where(vis, rng.uniform(-2.0, 0.0, vis.shape) * (rng.random(vis.shape) < 0.5), -np.inf)
            mask = to_mx(add, spec.dtype)
    key_ranges = None
    if spec.key_ranges:
        start = rng.integers(0, S, B)
        length = np.array([rng.integers(1, S - s + 1) for s in start])
        if spec.masked_row:
            length[rng.integers(0, B)] = 0
        key_ranges = mx.array(np.stack([start, length], axis=1).astype(np.int32))
    scale = D ** -0.5
    if not spec.bits:
        return Case(spec, q, kf, vf, mask, key_ranges, scale)
    kq = tuple(mx.quantize(kf, group_size=spec.group_size, bits=spec.bits))
    vq = tuple(mx.quantize(vf, group_size=spec.group_size, bits=spec.bits))
    mx.eval(kq, vq)
    return Case(spec, q, kq, vq, mask, key_ranges, scale, kf, vf)


def np_kv(case, k=None, v=None):
    """K and V as the oracle takes them: float64, quantized ones dequantized in float64."""
    k = case.k if k is None else k
    v = case.v if v is None else v
    if not case.spec.bits:
        return to_np(k), to_np(v)
    return tuple(oracle.dequantize(np.array(t[0]), to_np(t[1]), to_np(t[2]), bits=case.spec.bits,
                                   group_size=case.spec.group_size) for t in (k, v))


def oracle_of(case, mask=None, **kv):
    """(expected, stats) of the float64 oracle; `mask` (numpy) replaces the case's."""
    k, v = np_kv(case, **kv)
    m = case.np_mask() if mask is None else mask
    return oracle.attention(to_np(case.q), k, v, scale=case.scale, mask=m, key_ranges=case.np_key_ranges(),
                            stats=True)


def seen_rows(case, mask_np=None):
    """Boolean, q's leading shape (…, H_q, L): rows that see at least one key."""
    vis = case_visibility(case, mask_np).any(axis=-1)
    return vis if case.layered else vis[0]


def key_range_ends(case):
    """(B,) int64: where each request's key range ends (start + length)."""
    kr = case.np_key_ranges()
    return kr[:, 0] + kr[:, 1]


def case_visibility(case, mask_np=None):
    """(NL or 1, B, H_q, L, S) boolean: which key each query row of the case sees."""
    return visibility(case.spec, case.np_mask() if mask_np is None else mask_np, case.np_key_ranges())


def weights(case, mask_np=None):
    """float64 softmax weights (NL or 1, B, H_q, L, S) of the case's keys in each query row, as
    the oracle weighs them before normalising; 0 where the row does not see the key. `mask_np`
    (numpy) replaces the case's mask."""
    m = case.np_mask() if mask_np is None else mask_np
    return oracle.weights(to_np(case.q), np_kv(case)[0], scale=case.scale, mask=m, key_ranges=case.np_key_ranges())


# ------------------------------------------------------------------------------------------------
# What a kernel may be given


def dtypes_of(supports):
    return tuple(d for d in DTYPE_PREFERENCE if d in supports.dtypes)


def quantizable(supports):
    """(D, group_size, bits) triples the kernel takes."""
    return [(D, gs, b) for D in supports.head_dims for gs in supports.group_sizes for b in supports.bits
            if D % gs == 0 and D % 32 == 0]


def power_of_two_edges(limit, past=0):
    """1, 2, 3 and each power of two p <= limit with p - 1 and p + 1: the lengths where block and
    tile edges fall; those above limit + past are left out."""
    out = {1, 2, 3}
    p = 4
    while p <= limit:
        out |= {p - 1, p, p + 1}
        p *= 2
    return sorted(x for x in out if x <= limit + past)


def specs(kernel, profile, *, quantized=False, masks=None, min_B=1, gqa=None, layered=None,
          holes=None, masked_row=False, key_ranges=None):
    """A Hypothesis strategy of Specs the kernel supports; None when none can satisfy the needs.

    masks: the mask kinds allowed (default: every supported one); min_B: the least batch; gqa:
    True forces H_q > H_kv; layered: True forces a layer axis, False forbids it, None draws;
    key_ranges: True forces key ranges (fusedattend convention), None draws where supported."""
    from hypothesis import strategies as st

    sup = kernel.supports
    kinds = tuple(m for m in (masks or sup.masks) if m in sup.masks)
    dts = dtypes_of(sup)
    if not kinds or not dts or sup.max_B < min_B or (gqa and not sup.gqa) or (layered and not sup.layers):
        return None
    if key_ranges and not sup.key_ranges:
        return None
    qtriples = quantizable(sup) if quantized else None
    if quantized and not qtriples:
        return None
    s_limit = min(sup.max_S, profile.max_S)

    @st.composite
    def draw(draw):
        if quantized:
            D, gs, bits = draw(st.sampled_from(qtriples))
        else:
            D, gs, bits = draw(st.sampled_from(sup.head_dims)), 0, 0
        lay = draw(st.booleans()) if (layered is None and sup.layers) else bool(layered)
        NL = draw(st.integers(1, 3)) if lay else 0
        B = draw(st.integers(min_B, max(min_B, min(sup.max_B, 3))))
        H_kv = draw(st.sampled_from((1, 2)))
        G = draw(st.sampled_from((2, 4) if gqa else ((1, 2, 4) if sup.gqa else (1,))))
        S = draw(st.one_of(st.integers(1, min(64, s_limit)), st.sampled_from(power_of_two_edges(s_limit))))
        L = draw(st.integers(1, min(sup.max_L, 8)))
        mask = draw(st.sampled_from(kinds))
        kr = key_ranges if key_ranges is not None else (sup.key_ranges and draw(st.booleans()))
        arr = mask in ("bool", "additive")
        return Spec(
            B=B, H_q=H_kv * G, H_kv=H_kv, L=L, S=S, D=D, dtype=draw(st.sampled_from(dts)), mask=mask,
            mask_heads=arr and draw(st.booleans()),
            holes=arr and (holes if holes is not None else draw(st.booleans())),
            masked_row=masked_row, NL=NL, key_ranges=bool(kr), bits=bits, group_size=gs,
            amp=draw(st.sampled_from((1.0, 4.0))), seed=draw(st.integers(0, 2**31 - 1)),
        )

    return draw()


def fits(spec: Spec, kernel) -> bool:
    """Whether a pinned Spec lies inside what the kernel supports."""
    sup = kernel.supports
    if spec.bits:
        ok = (spec.D, spec.group_size, spec.bits) in quantizable(sup)
    else:
        ok = spec.D in sup.head_dims
    return (ok and spec.dtype in sup.dtypes and spec.mask in sup.masks and spec.L <= sup.max_L
            and spec.S <= sup.max_S and spec.B <= sup.max_B and (sup.gqa or spec.H_q == spec.H_kv)
            and (sup.layers or not spec.NL) and (sup.key_ranges or not spec.key_ranges))


def tiny_llm_grid(dtype="float32"):
    """tiny-llm's Week 2 decode grid: D = 128, L in {1, 8}, GQA in {1, 4}, S at block edges."""
    return [Spec(B=2, H_q=2 * g, H_kv=2, L=L, S=S, D=128, dtype=dtype, seed=1000 + i)
            for i, (L, g, S) in enumerate((L, g, S) for L in (1, 8) for g in (1, 4)
                                          for S in (1, 31, 32, 127, 128, 129, 255, 256))]


def layer_axis_layouts(dtype="float32"):
    """NL in {1, 4, 32}, and NL = 3 with B = 2: a kernel that swaps the layer and request strides
    reads another (layer, request)'s K/V there. Every layer's data differ."""
    return ([Spec(B=1, H_q=4, H_kv=2, L=1, S=33, D=64, dtype=dtype, NL=nl, seed=2000 + nl) for nl in (1, 4, 32)]
            + [Spec(B=2, H_q=4, H_kv=2, L=2, S=70, D=64, dtype=dtype, NL=3, mask="causal", seed=2003)])


def batch_edges(dtype="float32"):
    """Batches whose requests differ in no shape: float32 shows a split that depends on B."""
    return [Spec(B=2, H_q=4, H_kv=2, L=1, S=129, D=64, dtype=dtype, seed=3001),
            Spec(B=3, H_q=2, H_kv=1, L=4, S=300, D=128, dtype=dtype, mask="causal", seed=3002)]


def hidden_keys(dtype="float32"):
    """Array masks with key columns hidden from every row (holes), and with a row that sees no key."""
    return [Spec(B=2, H_q=4, H_kv=2, L=2, S=40, D=64, dtype=dtype, mask=m, holes=True, masked_row=row,
                 mask_heads=heads, seed=4000 + i)
            for i, (m, heads, row) in enumerate((m, heads, row) for m in ("bool", "additive")
                                                for heads in (False, True) for row in (False, True))]


def pinned(kernel, which, *, quantized=False):
    """The pinned Specs of `which` ("grid", "layers", "batch", "masks") that the kernel supports."""
    dts = dtypes_of(kernel.supports)
    if not dts:
        return []
    made = {"grid": tiny_llm_grid, "layers": layer_axis_layouts, "batch": batch_edges,
            "masks": hidden_keys}[which](dts[0])
    if quantized:
        triples = quantizable(kernel.supports)
        if not triples:
            return []
        D, gs, bits = next((t for t in triples if t[0] == 128), triples[0])
        made = [replace(s, D=D, group_size=gs, bits=bits) for s in made]
    return [s for s in made if fits(s, kernel)]


@dataclass(frozen=True)
class Profile:
    name: str
    max_examples: int  # a property's drawn examples (times its factor)
    max_S: int  # the longest S drawn
    derandomize: bool
    pinned: bool = True


PROFILES = {
    "quick": Profile("quick", 4, 300, True),
    "default": Profile("default", 40, 1100, False),
    "nightly": Profile("nightly", 400, 4200, False),
}
