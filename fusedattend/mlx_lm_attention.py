"""fusedattend inside mlx_lm's models: its attention function, decode steps taken by ours.

    import fusedattend as fa
    restore = fa.patch_mlx_lm()      # every mlx_lm model that calls base.scaled_dot_product_attention
    ...                              # generate as usual: KVCache, QuantizedKVCache, BatchKVCache
    restore()

Decode steps (L <= 8 query rows, no attention sinks) go to `decode_attention`, or to
`quantized_decode_attention` when the cache is quantized (it has `bits`, as mlx_lm's own function
checks). Prefill (longer L) and sinks go to mx.fast.scaled_dot_product_attention, as mlx_lm sends
a plain cache's: our fused kernels are for decode. A quantized cache is dequantized for them
first, where mlx_lm would call mx.quantized_matmul, which on MLX 0.32.4's CUDA backend raised for
every shape tried (a 9-token prompt over 49 keys; decode steps past 2048 keys).

Batched generation (mlx_lm's BatchGenerator) keeps requests left-padded in a BatchKVCache and
masks the padding with a boolean array. The patch has the cache's `make_mask` note, for each
mask that hides the left padding alone (no window, no right padding still to roll away), the
`key_ranges` that say the same: request b sees keys left_padding[b] .. S - 1. A decode step given
such a mask passes those ranges instead, so the kernels never read the padding nor a mask, the
call is replayed, and each request's attention is bit for bit what it would be alone. The ranges
are one KeyRanges.from_padding a cache until requests join or leave: checked once, as made, not
read back on the host by each layer's call, and one array on the GPU for every step.
"""

from __future__ import annotations

import sys
import weakref

import mlx.core as mx

from . import backends
from ._problem import MAX_FUSED_QUERY_LEN
from .api import decode_attention, dequantize_kv, quantized_decode_attention
from .key_ranges import KeyRanges
from . import mlx_lm_cache, window_cache

_NAME = "scaled_dot_product_attention"


class IdentityNotes:
    """A value noted for each of some objects, found by the object's identity (MLX arrays compare
    elementwise, so they cannot key a dict); a note goes when its object does."""

    def __init__(self):
        self._notes = {}  # id(obj) -> (weak reference to obj, value)

    def note(self, obj, value):
        key = id(obj)
        self._notes[key] = (weakref.ref(obj, lambda _: self._notes.pop(key, None)), value)

    def get(self, obj):
        """The value noted for obj itself, or None."""
        entry = self._notes.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def clear(self):
        self._notes.clear()

    def __len__(self):
        return len(self._notes)


# (S, key_ranges) noted for each mask of left padding alone that a patched BatchKVCache.make_mask
# returned; a note goes with its mask.
_PADDING_RANGES = IdentityNotes()
# (left padding, its KeyRanges.from_padding) of each BatchKVCache: one KeyRanges, and one array
# on the GPU, from step to step until requests join or leave.
_CACHE_PADDING = IdentityNotes()


def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None, *, backend=None):
    """mlx_lm.models.base.scaled_dot_product_attention's signature and meaning, decode fused.

    Differs from mlx_lm's where fusedattend does on purpose (README, "Semantics"): in a decode
    step a row that sees no key is zeros, and a batch's requests are computed as they would be alone.
    """
    if not isinstance(queries, mx.array):
        raise TypeError(f"queries must be an mlx.core.array, got {type(queries).__name__}")
    if isinstance(keys, window_cache.CacheView):  # a QuantizedWindowCache's, under the patch
        return _over_window_cache(queries, keys, values, scale, sinks, backend)
    quantized = hasattr(cache, "bits")
    if quantized and not hasattr(cache, "group_size"):
        raise TypeError(f"cache has bits but no group_size: {type(cache).__name__}")
    L = queries.shape[-2]
    if sinks is None and L <= MAX_FUSED_QUERY_LEN:
        key_ranges = padding_key_ranges(mask, keys)
        if key_ranges is not None:
            mask = "causal" if L > 1 else None
        if quantized:
            return quantized_decode_attention(queries, keys, values, scale=scale, mask=mask, key_ranges=key_ranges,
                                              bits=cache.bits, group_size=cache.group_size, backend=backend)
        return decode_attention(queries, keys, values, scale=scale, mask=mask, key_ranges=key_ranges,
                                backend=backend)
    if quantized:
        keys, values = (dequantize_kv(*kv, bits=cache.bits, group_size=cache.group_size) for kv in (keys, values))
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask, sinks=sinks)


def _over_window_cache(queries, keys, values, scale, sinks, backend):
    """Decode steps: the quantized tokens and the window in one call. Prompts and sinks: MLX's
    SDPA over each request's keys dequantized, under the cache's own mask for them; a first
    update (the cache was empty) over its own keys, as they came."""
    cache, L = keys.cache, queries.shape[-2]
    # Right-padded rows (a batched prompt's short chunk) take the mask: the fused call aligns
    # every request's last row to its newest key, which a padded request's last row is not.
    if keys.fresh is None and sinks is None and L <= MAX_FUSED_QUERY_LEN and not cache.last_update_padded():
        return cache.attend(queries, scale, backend)
    keys, values = (keys.fresh, values.fresh) if keys.fresh is not None else cache.dequantized(in_blocks=True)
    # An array only where requests differ: an aligned batch keeps "causal", the mask a bf16
    # KVCache's batch of equal prompts gives MLX's SDPA, so that both take the same kernel (an
    # array can send it to its unfused form, which holds B x H x L x S scores).
    mask = cache.attention_mask(L)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask, sinks=sinks)


def padding_key_ranges(mask, keys):
    """The key_ranges noted for `mask` (a BatchKVCache's mask of left padding alone), or None:
    any other mask stays a mask, and so does one made for another number of keys."""
    entry = _PADDING_RANGES.get(mask) if isinstance(mask, mx.array) else None
    if entry is None:
        return None
    S, ranges = entry
    k = keys[0] if isinstance(keys, tuple) else keys  # a quantized cache's (codes, scales, biases)
    return ranges if isinstance(k, mx.array) and k.ndim >= 2 and k.shape[-2] == S else None


def _noting_padding_ranges(make_mask):
    """BatchKVCache.make_mask, noting the key ranges of each mask that hides left padding alone."""

    def noting(cache, N, *args, **kwargs):
        mask = make_mask(cache, N, *args, **kwargs)
        if (N <= MAX_FUSED_QUERY_LEN and not args and kwargs.get("window_size") is None
                and getattr(cache, "_right_padding", None) is None and isinstance(mask, mx.array)):
            S = cache._idx + N  # the keys the layers will see, this step's N appended
            # left_padding changes only when requests join or leave (mlx_lm's filter reads it on
            # the host too); after a join this read waits for the joined arrays.
            pads = tuple(cache.left_padding.tolist())
            known = _CACHE_PADDING.get(cache)
            if known is None or known[0] != pads:
                known = (pads, KeyRanges.from_padding(left=pads))
                _CACHE_PADDING.note(cache, known)
            if known[1].min_keys > S:  # padding past the keys: not the mask of left padding alone
                return mask
            _PADDING_RANGES.note(mask, (S, known[1]))
        return mask

    return noting


def patch_mlx_lm(backend=None):
    """Route mlx_lm's attention through fusedattend; returns a function that undoes it.

    Replaces `scaled_dot_product_attention` in mlx_lm.models.base and in every mlx_lm.models
    module imported so far that took it from there (models imported later take the patched one),
    and wraps BatchKVCache.make_mask to note its padding as key ranges (module docstring).
    Models that call mx.fast.scaled_dot_product_attention themselves are not affected.
    """
    if backend is not None:
        backends.resolve(backend)  # a bad name fails here, not at the model's first decode step
    import mlx_lm.models.base as base
    from mlx_lm.models.cache import BatchKVCache

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
    make_mask = BatchKVCache.make_mask
    BatchKVCache.make_mask = _noting_padding_ranges(make_mask)
    mlx_lm_cache.register_with_mlx_lm()
    window_cache._PATCHES[0] += 1  # QuantizedWindowCache hands the patched function CacheViews

    restored = []

    def restore():
        for module in modules:
            if getattr(module, _NAME, None) is patched:
                setattr(module, _NAME, original)
        BatchKVCache.make_mask = make_mask
        if not restored:  # restoring twice must not undo another patch's count
            window_cache._PATCHES[0] -= 1
            restored.append(True)
        _PADDING_RANGES.clear()
        _CACHE_PADDING.clear()

    return restore
