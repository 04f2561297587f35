"""Fixed parity grids, importable without pytest (`python -m fusedattend check` prints them).

    from fusedattend.conformance.grids import GRID_A, GRID_B, GRID_Q, make_case, oracle_reference, tolerance
    for case in GRID_A:
        c = make_case(case, seed=0)
        out = fusedattend.decode_attention(c.q, c.k, c.v, mask=c.mask, backend="cpu")
        expected, stats = oracle_reference(c)
        ratio, err = compare(out, expected, tolerance(c, expected, stats))   # ratio <= 1 passes

GRID_A  decode guard: D=128, L in {1,8}, GQA in {1,4}, S around 32/128/256, masks none /
        causal / explicit additive, bfloat16.
GRID_B  MLX's own decode shapes: H_q=32, H_kv in {32, 8}, D=128, L=1, S in {7,...,2000}, masks
        none / bool / additive / causal, float16 and float32.
GRID_Q  quantized: bits 4 and 8, group sizes 32/64/128, GQA 1 and 4, vs mlx_lm's
        quantized_scaled_dot_product_attention and the oracle.

Tolerances (fusedattend/conformance/oracle.py; docs/testing.md has the derivation):
  tolerance(c, …)      ours vs the float64 oracle: float32 accumulation + output rounding.
  peer_tolerance(c, …) ours vs an MLX peer (mx.fast.scaled_dot_product_attention, mlx_lm's
                       quantized SDPA) that may round scores/weights to the input dtype: the
                       sum of our bound and oracle.low_precision_tolerance for the peer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
import zlib
from typing import Optional

import mlx.core as mx
import numpy as np

from . import oracle

DTYPE_NAMES = {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}


@dataclass(frozen=True)
class GridCase:
    grid: str
    B: int
    H_q: int
    H_kv: int
    L: int
    S: int
    D: int
    dtype: object
    mask: str  # "none", "causal", "bool", "additive"
    bits: Optional[int] = None
    group_size: Optional[int] = None

    @property
    def id(self):
        q = f"-q{self.bits}g{self.group_size}" if self.bits else ""
        return (f"{self.grid}-B{self.B}-Hq{self.H_q}-Hkv{self.H_kv}-L{self.L}-S{self.S}-D{self.D}-"
                f"{DTYPE_NAMES[self.dtype]}-{self.mask}{q}")


@dataclass
class Built:
    """The mx arrays of one grid case (plus the numpy mask the oracle takes)."""

    case: GridCase
    q: mx.array
    k: object
    v: object
    mask: object  # None, "causal" or mx.array
    np_mask: object
    k_float: mx.array = None
    v_float: mx.array = None
    extra: dict = field(default_factory=dict)

    @property
    def dtype_name(self):
        return DTYPE_NAMES[self.case.dtype]


GRID_A = [
    GridCase("A", 2, 2 * g, 2, L, S, 128, mx.bfloat16, m)
    for L in (1, 8)
    for g in (1, 4)
    for S in (1, 31, 32, 127, 128, 129, 255, 256)
    for m in ("none", "causal", "additive")
]

GRID_B = [
    GridCase("B", 1, 32, hkv, 1, S, 128, dt, m)
    for dt in (mx.float16, mx.float32)
    for hkv in (32, 8)
    for S in (7, 9, 32, 63, 67, 129, 400, 2000)
    for m in ("none", "bool", "additive", "causal")
]

GRID_Q = [
    GridCase("Q", 1, 4 * g, 4, L, S, 128, dt, m, bits, gs)
    for bits in (4, 8)
    for gs in (32, 64, 128)
    for g in (1, 4)
    for (L, S, dt, m) in ((1, 129, mx.bfloat16, "none"), (4, 300, mx.float16, "causal"),
                          (1, 64, mx.float16, "bool"), (2, 33, mx.bfloat16, "additive"))
]


def _to_mx(a, dtype):
    return mx.array(np.asarray(a, dtype=np.float32)).astype(dtype)


def np_of(x):
    return np.array(x.astype(mx.float32)).astype(np.float64)


def make_case(case: GridCase, seed: int = 0) -> Built:
    """Deterministic arrays for `case`. Array masks keep at least one visible key per row (so
    MLX's SDPA and ours agree there); additive masks mix 0, -inf and small negative values."""
    rng = np.random.default_rng([seed, zlib.crc32(case.id.encode())])
    B, H_q, H_kv, L, S, D = case.B, case.H_q, case.H_kv, case.L, case.S, case.D
    q = _to_mx(rng.standard_normal((B, H_q, L, D)), case.dtype)
    kf = _to_mx(rng.standard_normal((B, H_kv, S, D)), case.dtype)
    vf = _to_mx(rng.standard_normal((B, H_kv, S, D)), case.dtype)
    if case.mask in ("none", "causal"):
        mask = np_mask = None if case.mask == "none" else "causal"
    else:
        vis = rng.random((B, 1, L, S)) < 0.7
        vis[..., rng.integers(0, S)] = True  # every row sees at least one key
        if case.mask == "bool":
            np_mask = vis
            mask = mx.array(vis)
        else:
            add = np.where(vis, rng.uniform(-2.0, 0.0, vis.shape) * (rng.random(vis.shape) < 0.5), -np.inf)
            mask = _to_mx(add, case.dtype)
            np_mask = np_of(mask)
    if case.bits is None:
        return Built(case, q, kf, vf, mask, np_mask)
    kq = tuple(mx.quantize(kf, group_size=case.group_size, bits=case.bits))
    vq = tuple(mx.quantize(vf, group_size=case.group_size, bits=case.bits))
    return Built(case, q, kq, vq, mask, np_mask, kf, vf)


def np_kv(c: Built):
    if c.case.bits is None:
        return np_of(c.k), np_of(c.v)
    return tuple(
        oracle.dequantize(np.array(t[0]), np_of(t[1]), np_of(t[2]), bits=c.case.bits, group_size=c.case.group_size)
        for t in (c.k, c.v)
    )


def oracle_reference(c: Built):
    """(expected, stats) from the float64 oracle on the case's exact inputs."""
    k, v = np_kv(c)
    return oracle.attention(np_of(c.q), k, v, mask=c.np_mask, stats=True)


def run(c: Built, backend=None):
    import fusedattend as fa

    if c.case.bits is None:
        return fa.decode_attention(c.q, c.k, c.v, mask=c.mask, backend=backend)
    return fa.quantized_decode_attention(c.q, c.k, c.v, mask=c.mask, bits=c.case.bits,
                                         group_size=c.case.group_size, backend=backend)


def sdpa_peer(c: Built):
    """mx.fast.scaled_dot_product_attention on the same (plain) inputs. With
    FUSEDATTEND_PEERS_ON_CPU=1 it runs on the CPU stream: under compute-sanitizer
    (runs under compute-sanitizer), so that MLX's cuDNN / cuBLAS kernels stay out of the log."""
    device = mx.cpu if os.environ.get("FUSEDATTEND_PEERS_ON_CPU") == "1" else mx.default_device()
    with mx.stream(device):
        out = mx.fast.scaled_dot_product_attention(c.q, c.k, c.v, scale=c.case.D**-0.5, mask=c.mask)
        mx.eval(out)
    return out


def mlx_lm_peer(c: Built):
    """mlx_lm's quantized SDPA (it scales the queries in place: give it a copy)."""
    from mlx_lm.models.base import quantized_scaled_dot_product_attention

    return quantized_scaled_dot_product_attention(
        mx.array(c.q), c.k, c.v, scale=c.case.D**-0.5, mask=c.mask,
        group_size=c.case.group_size, bits=c.case.bits,
    )


def tolerance(c: Built, expected, stats):
    """Ours vs the oracle (oracle.parity_tolerance)."""
    return oracle.parity_tolerance(expected, stats, c.dtype_name, c.case.D)


def peer_tolerance(c: Built, expected, stats):
    """Ours vs an MLX peer: our bound + the peer's dtype-rounding bound."""
    return tolerance(c, expected, stats) + oracle.low_precision_tolerance(expected, stats, c.dtype_name, c.case.D)


def visible_rows(c: Built):
    """Boolean (B, H_q, L): rows that see at least one key."""
    vis = oracle.visibility(tuple(c.q.shape), c.case.S, c.np_mask)[0]
    return vis.any(axis=-1)


def compare(actual, expected, tol, rows=None):
    """(ratio, max err) of |actual - expected| / tol over `rows` (boolean (B,H_q,L)) or all."""
    a = np_of(actual) if isinstance(actual, mx.array) else np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    t = np.broadcast_to(tol, e.shape)
    if rows is not None:
        a, e, t = a[rows], e[rows], t[rows]
    if a.size == 0:
        return 0.0, 0.0
    return oracle.compare(a, e, t)
