"""fusedattend inside mlx_lm's models: its attention function, decode steps taken by ours.

    import fusedattend as fa
    restore = fa.patch_mlx_lm()      # every mlx_lm model that calls base.scaled_dot_product_attention
    ...                              # generate as usual: KVCache and QuantizedKVCache alike
    restore()

Decode steps (L <= 8 query rows, no attention sinks) go to `decode_attention`, or to
`quantized_decode_attention` when the cache is quantized (it has `bits`, as mlx_lm's own function
checks). Prefill (longer L) and sinks go to mx.fast.scaled_dot_product_attention, as mlx_lm sends
a plain cache's: our fused kernels are for decode. A quantized cache is dequantized for them
first, where mlx_lm would call mx.quantized_matmul, which on MLX 0.32.4's CUDA backend raised for
every shape tried (a 9-token prompt over 49 keys; decode steps past 2048 keys).
"""

from __future__ import annotations

import sys

import mlx.core as mx

from . import backends
from ._problem import MAX_FUSED_QUERY_LEN
from .api import decode_attention, dequantize_kv, quantized_decode_attention

_NAME = "scaled_dot_product_attention"


def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None, *, backend=None):
    """mlx_lm.models.base.scaled_dot_product_attention's signature and meaning, decode fused.

    Differs from mlx_lm's where fusedattend does on purpose (README, "Semantics"): in a decode
    step a row that sees no key is zeros, and a batch's requests are computed as they would be alone.
    """
    quantized = hasattr(cache, "bits")
    if sinks is None and queries.shape[-2] <= MAX_FUSED_QUERY_LEN:
        if quantized:
            return quantized_decode_attention(queries, keys, values, scale=scale, mask=mask, bits=cache.bits,
                                              group_size=cache.group_size, backend=backend)
        return decode_attention(queries, keys, values, scale=scale, mask=mask, backend=backend)
    if quantized:
        keys, values = (dequantize_kv(*kv, bits=cache.bits, group_size=cache.group_size) for kv in (keys, values))
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask, sinks=sinks)


def patch_mlx_lm(backend=None):
    """Route mlx_lm's attention through fusedattend; returns a function that undoes it.

    Replaces `scaled_dot_product_attention` in mlx_lm.models.base and in every mlx_lm.models
    module imported so far that took it from there (models imported later take the patched one).
    Models that call mx.fast.scaled_dot_product_attention themselves are not affected.
    """
    if backend is not None:
        backends.resolve(backend)  # a bad name fails here, not at the model's first decode step
    import mlx_lm.models.base as base

    original = getattr(base, _NAME)
    if getattr(original, "_fusedattend", False):
        raise RuntimeError("mlx_lm is patched already: call the function the first patch returned")

    def patched(queries, keys, values, cache, scale, mask, sinks=None):
        return scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks, backend=backend)

    patched._fusedattend = True
    modules = [base] + [m for name, m in list(sys.modules.items())
                        if name.startswith("mlx_lm.models.") and getattr(m, _NAME, None) is original]
    for module in modules:
        setattr(module, _NAME, patched)

    def restore():
        for module in modules:
            if getattr(module, _NAME, None) is patched:
                setattr(module, _NAME, original)

    return restore
