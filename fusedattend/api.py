"""The public functions. Each validates (fusedattend._problem) and dispatches (fusedattend.backends)."""

from __future__ import annotations

import mlx.core as mx

from . import backends
from ._problem import (
    FLOAT_DTYPES,
    QuantizedKV,
    call_signature,
    check_bits,
    plain_problem,
    quantized_problem,
    quantized_signature,
    repeated_key_ranges,
)


def decode_attention(queries, keys, values, *, scale=None, mask=None, key_ranges=None, backend=None):
    """Attention of a few query rows over a K/V cache, fused.

    Args:
        queries: (B, H_q, L, D), or (NL, B, H_q, L, D) to run NL layers in one call.
        keys, values: (B, H_kv, S, D) (or with the layer axis); H_q must be a multiple of H_kv
            and query head h reads kv head h // (H_q // H_kv). Non-contiguous views (slices of a
            preallocated cache) are read in place.
        scale: multiplies q.k; None means 1/sqrt(D).
        mask: None, "causal" (lower-right aligned: the last query row sees every key), a boolean
            array (True = attend) or an additive float array, broadcast to (…, B, H_q, L, S).
        key_ranges: optional per-request (start, length): request b sees only keys
            start .. start+length-1 (for padded batches); "causal" then aligns to the range's end.
            A `KeyRanges` (checked once, as it is made) or a (B, 2) integer array (read back on
            the host by every call, to check it: on a GPU the kernels wait for that read).
        backend: "reference", "cpu", "metal", "cuda" or None (fastest here; the environment
            variable FUSEDATTEND_BACKEND overrides).

    Returns:
        (…, B, H_q, L, D) in the queries' dtype; a row that sees no key is zeros.
    """
    signature = call_signature((queries, keys, values), scale, mask, key_ranges)
    replay = backends.replay(signature, backend)  # a repeat of a checked call: its launches alone
    if replay is not None:
        return replay(queries, keys, values, *repeated_key_ranges(key_ranges, queries, keys.shape[-2]))
    problem = plain_problem(queries, keys, values, scale, mask, key_ranges)
    return backends.run(problem, backend, quantized=False, signature=signature)


def quantized_decode_attention(
    queries, keys, values, *, scale=None, mask=None, key_ranges=None, bits=4, group_size=64, backend=None
):
    """`decode_attention` over quantized K/V, read without dequantizing the cache.

    keys and values are (codes, scales, biases) triples in mx.quantize's affine format, as
    `quantize_kv` or mlx_lm's QuantizedKVCache hold them. Equals `dequantize_kv` followed by
    `decode_attention` within float tolerance.
    """
    signature = quantized_signature(queries, keys, values, scale, mask, key_ranges, bits, group_size)
    replay = backends.replay(signature, backend)
    if replay is not None:
        return replay(queries, *keys, *values, *repeated_key_ranges(key_ranges, queries, keys[0].shape[-2]))
    problem = quantized_problem(queries, keys, values, scale, mask, key_ranges, bits, group_size)
    return backends.run(problem, backend, quantized=True, signature=signature)


def quantize_kv(x, *, bits=4, group_size=64):
    """(codes, scales, biases) of `x` along its last axis, exactly as mx.quantize (affine) gives."""
    check_bits(bits, group_size)
    if not isinstance(x, mx.array):
        raise TypeError(f"x must be an mlx.core.array, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.ndim < 2 or 0 in x.shape:
        raise ValueError(f"x must have at least 2 axes and no empty one, got shape {tuple(x.shape)}")
    if x.shape[-1] % group_size:
        raise ValueError(
            f"group_size={group_size} must divide the last axis of x, got shape {tuple(x.shape)}"
        )
    return QuantizedKV(*mx.quantize(x, group_size=group_size, bits=bits))


def dequantize_kv(codes, scales, biases, *, bits, group_size):
    """Inverse of `quantize_kv` (mx.dequantize, affine), in the scales' dtype."""
    check_bits(bits, group_size)
    for arr, name in ((codes, "codes"), (scales, "scales"), (biases, "biases")):
        if not isinstance(arr, mx.array):
            raise TypeError(f"{name} must be an mlx.core.array, got {type(arr).__name__}")
    if codes.dtype != mx.uint32:
        raise TypeError(f"codes must be uint32, got {codes.dtype}")
    for arr, name in ((scales, "scales"), (biases, "biases")):
        if arr.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {arr.dtype}")
    if 0 in codes.shape:
        raise ValueError(f"codes must have no empty axis, got shape {tuple(codes.shape)}")
    if scales.shape != biases.shape:
        raise ValueError(f"scales {tuple(scales.shape)} and biases {tuple(biases.shape)} must match")
    if codes.ndim < 2 or codes.shape[:-1] != scales.shape[:-1]:
        raise ValueError(
            f"codes {tuple(codes.shape)} and scales {tuple(scales.shape)} must agree on every axis but the last"
        )
    if codes.shape[-1] * 32 != scales.shape[-1] * group_size * bits:
        raise ValueError(
            f"codes of last axis {codes.shape[-1]} and {scales.shape[-1]} groups do not fit "
            f"bits={bits}, group_size={group_size}"
        )
    return mx.dequantize(codes, scales, biases, group_size=group_size, bits=bits)
