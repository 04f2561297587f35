"""The normalised form of one attention call, and the validation that produces it.

Every public entry point validates its arguments here, before any kernel runs, and hands the
backends one `Problem`: the arrays as the caller passed them (4-D, or 5-D with a layer axis NL in
front: `layered`), a `Mask`, the scale and the optional per-request key ranges. Backends never
see bad input. The GPU kernels read either form in place; the other backends take the 5-D one
(`Problem.with_layer_axis`): adding the axis is an MLX op of about 0.7 µs an array, host time on
every call.

Shapes (layered; without the layer axis when not):
    q        (NL, B, H_q,  L, D)
    k, v     (NL, B, H_kv, S, D)                  plain
    k, v     QuantizedKV of (NL, B, H_kv, S, ·)   quantized (codes, scales, biases)
    mask     5-D, broadcastable to (NL, B, H_q, L, S)
    ranges   (B, 2) int32 of (start, length, or -(right + 1): key_ranges.key_range_end), or None
             (given as a KeyRanges or a (B, 2) array)
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import mlx.core as mx
import numpy as np

from .key_ranges import KeyRanges, checked_key_ranges as _key_ranges

FLOAT_DTYPES = (mx.float32, mx.float16, mx.bfloat16)
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_HEAD_DIM = 256
HEAD_DIM_MULTIPLE = 8
SUPPORTED_BITS = (2, 4, 8)
REFUSED_BITS = (3, 5, 6)  # valid for mx.quantize, but packed across word boundaries
SUPPORTED_GROUP_SIZES = (32, 64, 128)
MAX_FUSED_QUERY_LEN = 8  # longer L goes to the reference path on every backend


class QuantizedKV(NamedTuple):
    """mx.quantize's affine triple: codes packed into uint32 along D, one scale/bias per group."""

    codes: mx.array
    scales: mx.array
    biases: mx.array


class Mask(NamedTuple):
    """kind is "none", "causal", "bool" (True = attend) or "additive" (-inf = hidden).

    `array` is None for "none" and "causal"; otherwise a 5-D array broadcastable to
    (NL, B, H_q, L, S).
    """

    kind: str
    array: Optional[mx.array] = None


NO_MASK = Mask("none")
CAUSAL_MASK = Mask("causal")


class Problem(NamedTuple):  # a NamedTuple: immutable, and 4x cheaper to build than a frozen dataclass
    q: mx.array
    k: object  # mx.array, or QuantizedKV for the quantized entry point
    v: object
    scale: float
    mask: Mask
    key_ranges: Optional[mx.array]  # (B, 2) int32, or None
    layered: bool  # the arrays are 5-D: the caller passed the layer axis
    bits: Optional[int] = None
    group_size: Optional[int] = None

    @property
    def shape(self):
        """(NL, B, H_q, H_kv, L, S, D); NL = 1 when not layered."""
        keys = self.k.codes if isinstance(self.k, QuantizedKV) else self.k
        if self.layered:
            NL, B, H_q, L, D = self.q.shape
            return NL, B, H_q, keys.shape[2], L, keys.shape[3], D
        B, H_q, L, D = self.q.shape
        return 1, B, H_q, keys.shape[1], L, keys.shape[2], D

    @property
    def arrays(self):
        """The caller's arrays in the kernels' order: q, k, v; quantized, q and the six of K/V;
        then the (checked, int32) key_ranges where the call has them."""
        ranges = () if self.key_ranges is None else (self.key_ranges,)
        if isinstance(self.k, QuantizedKV):
            return (self.q, *self.k, *self.v, *ranges)
        return (self.q, self.k, self.v, *ranges)

    def with_arrays(self, arrays) -> "Problem":
        """The same problem over other arrays, given in `arrays`' order."""
        if self.bits is not None:
            q, k, v, ranges = arrays[0], QuantizedKV(*arrays[1:4]), QuantizedKV(*arrays[4:7]), arrays[7:]
        else:
            q, k, v, ranges = *arrays[:3], arrays[3:]
        return self._replace(q=q, k=k, v=v, key_ranges=ranges[0] if ranges else None)

    def with_layer_axis(self) -> "Problem":
        """The same problem with 5-D arrays: a layer axis of one added where the caller passed
        none (`layered` then says True; `unlayer` of the caller's problem drops it again)."""
        if self.layered:
            return self

        def expand(x):
            return QuantizedKV(*(mx.expand_dims(a, 0) for a in x)) if isinstance(x, QuantizedKV) else mx.expand_dims(x, 0)

        return self._replace(q=expand(self.q), k=expand(self.k), v=expand(self.v), layered=True)

    def unlayer(self, out: mx.array) -> mx.array:
        """Drop the layer axis again when the caller did not pass one (unless a backend did)."""
        return out if self.layered or out.ndim == 4 else out[0]


def _require_array(x, name):
    if not isinstance(x, mx.array):
        raise TypeError(f"{name} must be an mlx.core.array, got {type(x).__name__}")
    return x


def _require_float(x, name):
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {x.dtype}")


def _check_head_dim(D, what="D (the last axis of queries)"):
    if D % HEAD_DIM_MULTIPLE or not (HEAD_DIM_MULTIPLE <= D <= MAX_HEAD_DIM):
        raise ValueError(
            f"{what} must be a multiple of {HEAD_DIM_MULTIPLE} between "
            f"{HEAD_DIM_MULTIPLE} and {MAX_HEAD_DIM}, got {D}"
        )


def _layered_queries(queries):
    _require_array(queries, "queries")
    _require_float(queries, "queries")
    if queries.ndim not in (4, 5):
        raise ValueError(
            "queries must have shape (B, H_q, L, D) or (NL, B, H_q, L, D), "
            f"got ndim={queries.ndim} shape={tuple(queries.shape)}"
        )
    layered = queries.ndim == 5
    q = queries if layered else mx.expand_dims(queries, 0)
    NL, B, H_q, L, D = q.shape
    if L == 0:
        raise ValueError("queries has L = 0 (axis -2): at least one query row is needed")
    if B == 0 or H_q == 0 or NL == 0:
        raise ValueError(f"queries has an empty batch, head or layer axis: {tuple(queries.shape)}")
    _check_head_dim(D)
    return q, layered


def _layered_kv(x, name, layered, q):
    """Bring keys or values (or one array of a quantized triple) to 5-D and check the lead axes."""
    want = 5 if layered else 4
    if x.ndim != want:
        form = "(NL, B, H_kv, S, ·)" if layered else "(B, H_kv, S, ·)"
        raise ValueError(
            f"{name} must have shape {form} to match {q.ndim if layered else 4}-D queries, "
            f"got ndim={x.ndim} shape={tuple(x.shape)}"
        )
    x5 = x if layered else mx.expand_dims(x, 0)
    NL, B, H_q = q.shape[:3]
    if x5.shape[0] != NL and layered:
        raise ValueError(f"{name} has {x5.shape[0]} layers (axis 0) but queries have {NL}")
    if x5.shape[1] != B:
        raise ValueError(
            f"{name} has batch size {x5.shape[1]} but queries have {B} (axis {int(layered)})"
        )
    H_kv = x5.shape[2]
    if H_kv == 0 or H_q % H_kv:
        raise ValueError(
            f"{name} has H_kv={H_kv} heads; the queries' H_q={H_q} must be a multiple of it"
        )
    if x5.shape[3] == 0:
        raise ValueError(f"{name} has S = 0 keys (axis -2): at least one key is needed")
    return x5


def _check_same(a, b, what, names):
    if a != b:
        raise ValueError(f"{names[0]} and {names[1]} disagree on {what}: {a} vs {b}")


def _scale(scale, D):
    if scale is None:
        return 1.0 / math.sqrt(D)
    # Any real number, numpy's scalars included, as mx.fast.scaled_dot_product_attention takes it;
    # not a bool, nor an mx.array (reading it would wait for the device).
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    try:
        scale = float(scale)
    except OverflowError:
        scale = math.inf
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if abs(scale) > FLOAT32_MAX:  # the kernels scale in float32: every score would overflow
        raise ValueError(f"scale must be finite in float32 (|scale| <= {FLOAT32_MAX:.4g}), got {scale:.4g}")
    return scale


def _mask(mask, target_shape):
    """Validate `mask` against (NL, B, H_q, L, S) and return a Mask with a 5-D array."""
    if mask is None:
        return NO_MASK
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f'mask must be None, "causal" or an array, got the string {mask!r}')
        return CAUSAL_MASK
    if not isinstance(mask, mx.array):
        raise TypeError(
            f'mask must be None, "causal", a boolean array or an additive float array, '
            f"got {type(mask).__name__}"
        )
    if mask.dtype == mx.bool_:
        kind = "bool"
    elif mask.dtype in FLOAT_DTYPES:
        kind = "additive"
    else:
        raise TypeError(
            f"mask must be boolean (True = attend) or float (additive), got dtype {mask.dtype}"
        )
    if mask.ndim > 5 or mask.ndim == 0:
        raise ValueError(f"mask must have 1 to 5 axes broadcastable to {target_shape}, got {mask.ndim}")
    try:
        shape = mx.broadcast_shapes(tuple(mask.shape), tuple(target_shape))
    except ValueError:
        shape = None
    if shape != tuple(target_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to {tuple(target_shape)} "
            "(NL, B, H_q, L, S)"
        )
    array = mask.reshape((1,) * (5 - mask.ndim) + tuple(mask.shape))
    return Mask(kind, array)


# Signatures of calls whose arguments passed the checks: everything the checks look at (each
# array's shape and dtype; scale; mask None or "causal"; bits and group size), but for the keys'
# length S where every K/V array has the same S, at least 1 (nothing else checked depends on it).
# A decode loop repeats one signature every step while its cache grows a key a step, so its
# checks run once; they cost tens of µs a call, the signature about 1 µs. key_ranges enter by
# shape and dtype (a KeyRanges by its length); their values are checked again every call
# (repeated_key_ranges: an array's read back, a KeyRanges' min_keys compared with S). Calls with a
# mask array are checked in full every time: that check reads the mask. The GPU backends replay
# such a call's launches by the same signature (backends.replay).
_CHECKED = set()
_CHECKED_MAX = 4096


def call_signature(arrays, scale, mask, key_ranges, *options):
    """The key of _CHECKED for a call, or None when the call must be checked in full."""
    if not (mask is None or type(mask) is str):
        return None
    queries = arrays[0]
    if not isinstance(queries, mx.array):
        return None
    key = [type(scale), scale, mask, *options, queries.shape, queries.dtype]
    if key_ranges is not None:
        if isinstance(key_ranges, KeyRanges):
            key += ("key_ranges", KeyRanges, len(key_ranges))
        elif isinstance(key_ranges, mx.array):
            key += ("key_ranges", key_ranges.shape, key_ranges.dtype)
        else:
            return None
    S = None
    for x in arrays[1:]:  # K/V: S (axis -2) left out
        if not isinstance(x, mx.array):
            return None
        shape = x.shape
        if len(shape) < 4 or shape[-2] < 1 or (S is not None and shape[-2] != S):
            return None
        S = shape[-2]
        key += (shape[:-2], shape[-1], x.dtype)
    return tuple(key)


def _was_checked(signature) -> bool:
    try:
        return signature in _CHECKED
    except TypeError:  # an unhashable scale, bits, ...: the checks will name it
        return False


def _remember(signature):
    if signature is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED.add(signature)


def repeated_key_ranges(key_ranges, queries, S):
    """The key_ranges of a call whose signature already passed the checks, as the kernels take
    them: () without, else (the int32 array,) once its values passed _key_ranges (the signature
    holds their shape and dtype, not their values)."""
    if key_ranges is None:
        return ()
    return (_key_ranges(key_ranges, queries.shape[-4], S),)


def _checked_problem(queries, k, v, scale, mask, key_ranges, bits=None, group_size=None) -> Problem:
    """The Problem of a call whose signature already passed the checks."""
    if bits is not None:
        k, v = QuantizedKV(*k), QuantizedKV(*v)
    mask = NO_MASK if mask is None else CAUSAL_MASK
    ranges = _key_ranges(key_ranges, queries.shape[-4], (k.codes if bits is not None else k).shape[-2])
    return Problem(queries, k, v, _scale(scale, queries.shape[-1]), mask, ranges, queries.ndim == 5, bits, group_size)


def plain_problem(queries, keys, values, scale, mask, key_ranges) -> Problem:
    signature = call_signature((queries, keys, values), scale, mask, key_ranges)
    if _was_checked(signature):
        return _checked_problem(queries, keys, values, scale, mask, key_ranges)
    q, layered = _layered_queries(queries)
    for x, name in ((keys, "keys"), (values, "values")):
        _require_array(x, name)
        _require_float(x, name)
    if keys.dtype != queries.dtype or values.dtype != queries.dtype:
        raise TypeError(
            "queries, keys and values must share one dtype, got "
            f"{queries.dtype}, {keys.dtype}, {values.dtype}"
        )
    k = _layered_kv(keys, "keys", layered, q)
    v = _layered_kv(values, "values", layered, q)
    _check_same(k.shape[2], v.shape[2], "H_kv", ("keys", "values"))
    _check_same(k.shape[3], v.shape[3], "S (axis -2)", ("keys", "values"))
    _check_same(k.shape[4], q.shape[4], "D (axis -1)", ("keys", "queries"))
    _check_same(v.shape[4], q.shape[4], "D (axis -1)", ("values", "queries"))
    NL, B, H_q, L, D = q.shape
    S = k.shape[3]
    problem = Problem(
        queries, keys, values, _scale(scale, D), _mask(mask, (NL, B, H_q, L, S)),
        _key_ranges(key_ranges, B, S), layered,
    )
    _remember(signature)
    return problem


def check_bits(bits, group_size):
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"bits must be an int, got {type(bits).__name__}")
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    if bits in REFUSED_BITS:
        raise ValueError(
            f"bits={bits} is not supported by fusedattend (its codes straddle uint32 words); "
            f"use one of {SUPPORTED_BITS}"
        )
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    if group_size not in SUPPORTED_GROUP_SIZES:
        raise ValueError(f"group_size must be one of {SUPPORTED_GROUP_SIZES}, got {group_size}")


def _quantized_triple(x, name, layered, q, bits, group_size):
    if not isinstance(x, (tuple, list)) or len(x) != 3:
        raise TypeError(
            f"{name} must be a (codes, scales, biases) triple as returned by mx.quantize / "
            f"fusedattend.quantize_kv, got {type(x).__name__}"
        )
    codes, scales, biases = x
    for arr, part in ((codes, "codes"), (scales, "scales"), (biases, "biases")):
        _require_array(arr, f"{name}.{part}")
    if codes.dtype != mx.uint32:
        raise TypeError(f"{name}.codes must be uint32 (mx.quantize's packing), got {codes.dtype}")
    _require_float(scales, f"{name}.scales")
    _require_float(biases, f"{name}.biases")
    codes5 = _layered_kv(codes, f"{name}.codes", layered, q)
    scales5 = _layered_kv(scales, f"{name}.scales", layered, q)
    biases5 = _layered_kv(biases, f"{name}.biases", layered, q)
    D = q.shape[4]
    want_codes = D * bits // 32
    want_groups = D // group_size if D % group_size == 0 else None
    if want_groups is None:
        raise ValueError(
            f"group_size={group_size} does not divide the head dimension D={D} of the queries"
        )
    if tuple(codes5.shape[:4]) != tuple(scales5.shape[:4]) or tuple(scales5.shape) != tuple(biases5.shape):
        raise ValueError(
            f"{name}: codes {tuple(codes.shape)}, scales {tuple(scales.shape)} and biases "
            f"{tuple(biases.shape)} must agree on every axis but the last (scales == biases)"
        )
    if codes5.shape[4] != want_codes or scales5.shape[4] != want_groups:
        raise ValueError(
            f"{name}: with D={D}, bits={bits}, group_size={group_size} expected codes of last "
            f"axis {want_codes} and scales/biases of last axis {want_groups}, got "
            f"{codes5.shape[4]} and {scales5.shape[4]}"
        )
    return QuantizedKV(codes5, scales5, biases5)


def quantized_signature(queries, keys, values, scale, mask, key_ranges, bits, group_size):
    """call_signature of a quantized call (None unless keys and values are triples)."""
    if not all(isinstance(x, (tuple, list)) and len(x) == 3 for x in (keys, values)):
        return None
    return call_signature((queries, *keys, *values), scale, mask, key_ranges, type(bits), bits,
                          type(group_size), group_size)


def quantized_problem(queries, keys, values, scale, mask, key_ranges, bits, group_size) -> Problem:
    signature = quantized_signature(queries, keys, values, scale, mask, key_ranges, bits, group_size)
    if _was_checked(signature):
        return _checked_problem(queries, keys, values, scale, mask, key_ranges, bits, group_size)
    check_bits(bits, group_size)
    q, layered = _layered_queries(queries)
    k = _quantized_triple(keys, "keys", layered, q, bits, group_size)
    v = _quantized_triple(values, "values", layered, q, bits, group_size)
    _check_same(k.codes.shape[2], v.codes.shape[2], "H_kv", ("keys", "values"))
    _check_same(k.codes.shape[3], v.codes.shape[3], "S (axis -2)", ("keys", "values"))
    NL, B, H_q, L, D = q.shape
    S = k.codes.shape[3]
    problem = Problem(
        queries, QuantizedKV(*keys), QuantizedKV(*values), _scale(scale, D), _mask(mask, (NL, B, H_q, L, S)),
        _key_ranges(key_ranges, B, S), layered, bits, group_size,
    )
    _remember(signature)
    return problem
