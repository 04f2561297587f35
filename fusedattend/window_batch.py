"""Joining QuantizedWindowCaches into one batch (mlx_lm's merge and extend).

Each request's rows keep their layout (quantized tokens and window left-aligned), so joining is
concatenation along the batch axis: quantized buffers zero-extended to the longest capacity,
empty caches given zero rows. Requests join as they are; nothing is re-quantized.
"""

from __future__ import annotations

import mlx.core as mx


def _like(caches):
    """(H, D, dtype, bits, group_size, window) shared by the caches, or ValueError."""
    first = caches[0]
    settings = (first.quant_bits, first.quant_group_size, first.window)
    shapes = set()
    for c in caches:
        if type(c) is not type(first):
            raise TypeError(f"caches must all be {type(first).__name__}, got {type(c).__name__}")
        if (c.quant_bits, c.quant_group_size, c.window) != settings:
            raise ValueError("caches must share bits, group_size and window to be batched, got "
                             f"{settings} and {(c.quant_bits, c.quant_group_size, c.window)}")
        if c._wk is not None:
            shapes.add((c._wk.shape[1], c._wk.shape[3], c._wk.dtype))
    if len(shapes) > 1:
        raise ValueError("caches must share heads, head dimension and dtype to be batched, got "
                         f"{sorted(map(str, shapes))}")
    return (shapes.pop() if shapes else None), settings


def concatenated(cls, caches):
    """A batched cache of `caches`' requests in order."""
    caches = list(caches)
    if not caches:
        raise ValueError("caches must hold at least one cache")
    shape, (bits, group_size, window) = _like(caches)
    out = cls(bits, group_size, window)
    out._batched = True
    out._qlen = [n for c in caches for n in c._qlen]
    out._wlen = [n for c in caches for n in c._wlen]
    out._last = [n for c in caches for n in c._last]
    pending = [c._pending for c in caches]
    out._pending = None
    if any(p is not None for p in pending):
        out._pending = [n for c, p in zip(caches, pending) for n in (p if p is not None else [0] * c.batch_size)]
    if shape is not None:
        H, D, dtype = shape
        out._wk = mx.concatenate([c._wk if c._wk is not None else mx.zeros((c.batch_size, H, 2 * window, D), dtype)
                                  for c in caches])
        out._wv = mx.concatenate([c._wv if c._wv is not None else mx.zeros((c.batch_size, H, 2 * window, D), dtype)
                                  for c in caches])
        capacity = max((c._kq[0].shape[2] for c in caches if c._kq is not None), default=0)
        if capacity:
            widths = [(D * bits // 32, mx.uint32), (D // group_size, dtype), (D // group_size, dtype)]

            def rows(c, part):
                if part is None:
                    return [mx.zeros((c.batch_size, H, capacity, w), t) for w, t in widths]
                short = capacity - part[0].shape[2]
                if not short:
                    return part
                return [mx.concatenate([x, mx.zeros((c.batch_size, H, short, x.shape[3]), x.dtype)], axis=2)
                        for x in part]

            out._kq = [mx.concatenate(xs) for xs in zip(*(rows(c, c._kq) for c in caches))]
            out._vq = [mx.concatenate(xs) for xs in zip(*(rows(c, c._vq) for c in caches))]
    out._set_offset()
    return out
