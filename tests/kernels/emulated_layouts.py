"""K, V and the mask of a case, each laid out on its own, for the kernels' CPU emulation.

The property strategies give K and V one layout between them (both contiguous, both slices of
caches of one capacity, both transposed) and masks a contiguous key axis. A kernel that steps V
with K's strides, or reads the mask along its keys with stride 1, passes such cases: the strides
it confuses are equal. Here each array draws its own: a slice of a cache with its own number of
spare keys (and spare heads, or spare elements after each key's: a key stride of its own), D the
strided axis, or as made; masks a slice of a wider buffer
(keys 2 apart), the transpose of an (S, L) buffer, or one value a row broadcast over the keys
(key stride 0). Spare keys and spare mask columns hold junk (NaN, random codes, flipped bits), so
a kernel that reads them shows it.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

PLAIN_FORMS = ("as_made", "cache", "cache_heads", "rows_padded", "transposed")
QUANTIZED_FORMS = ("as_made", "cache", "cache_heads", "rows_padded")
MASK_FORMS = ("as_made", "keys_strided", "transposed", "keys_broadcast")


def _with_spare(x: mx.array, spare_keys: int, spare_heads: int, spare_elements: int, rng) -> mx.array:
    """x as buffer[..., :H, :S, :W] of a buffer with more heads, keys and elements a key (a key
    stride of its own), junk in the rest."""
    *lead, H, S, W = x.shape
    shape = (*lead, H + spare_heads, S + spare_keys, W + spare_elements)
    if x.dtype == mx.uint32:
        buf = rng.integers(0, 2**32, shape, dtype=np.uint32)
        buf[..., :H, :S, :W] = np.array(x)
        return mx.array(buf)[..., :H, :S, :W]
    buf = np.full(shape, np.nan, dtype=np.float32)
    buf[..., :H, :S, :W] = np.array(x.astype(mx.float32))
    return mx.array(buf).astype(x.dtype)[..., :H, :S, :W]


def _spare(form: str, rng):
    """(keys, heads, elements) of spare room for a cache form."""
    keys = int(rng.integers(1, 40))
    heads = int(rng.integers(1, 3)) if form == "cache_heads" else 0
    elements = int(rng.integers(1, 9)) if form == "rows_padded" else 0
    return keys, heads, elements


def plain_form(x: mx.array, form: str, rng) -> mx.array:
    if form == "as_made":
        return x
    if form == "transposed":
        return mx.swapaxes(mx.contiguous(mx.swapaxes(x, -1, -2)), -1, -2)
    return _with_spare(x, *_spare(form, rng), rng)


def quantized_form(triple, form: str, rng):
    if form == "as_made":
        return tuple(triple)
    return tuple(_with_spare(x, *_spare(form, rng), rng) for x in triple)


def mask_form(mask, form: str, rng):
    """The same mask values (but for keys_broadcast: key 0's value for every key of a row)."""
    if mask is None or isinstance(mask, str) or form == "as_made":
        return mask
    if form == "keys_broadcast":
        return mask[..., :1]
    values = np.array(mask) if mask.dtype == mx.bool_ else np.array(mask.astype(mx.float32))

    def as_mask(a):  # (cast before any view is taken: astype copies a view into a contiguous array)
        return mx.array(a) if mask.dtype == mx.bool_ else mx.array(a).astype(mask.dtype)

    if form == "transposed" and values.ndim >= 2 and values.shape[-2] > 1:
        return mx.swapaxes(as_mask(np.ascontiguousarray(np.swapaxes(values, -1, -2))), -1, -2)
    # keys 2 apart: every other column of a buffer twice as wide, the columns between junk
    wide = np.empty(values.shape[:-1] + (2 * values.shape[-1],), dtype=values.dtype)
    wide[..., ::2] = values
    wide[..., 1::2] = ~values if values.dtype == np.bool_ else np.where(np.isinf(values), 0.0, -np.inf)
    return as_mask(wide)[..., ::2]


def relaid(case, k_form: str, v_form: str, m_form: str, seed: int = 0):
    """`case` with K, V and the mask in those forms, each its own spare sizes."""
    rng = np.random.default_rng(seed)
    if case.bits is None:
        k, v = plain_form(case.k, k_form, rng), plain_form(case.v, v_form, rng)
    else:
        k, v = quantized_form(case.k, k_form, rng), quantized_form(case.v, v_form, rng)
    mask = mask_form(case.mask, m_form, rng)
    info = {**case.info, "relaid": (k_form, v_form, m_form)}
    return dataclasses.replace(case, k=k, v=v, mask=mask, info=info)


@st.composite
def independent_layouts(draw, case):
    """`case` with K, V and the mask each in a form drawn on its own."""
    forms = QUANTIZED_FORMS if case.bits is not None else PLAIN_FORMS
    k_form, v_form = draw(st.sampled_from(forms)), draw(st.sampled_from(forms))
    m_form = draw(st.sampled_from(MASK_FORMS))
    return relaid(case, k_form, v_form, m_form, seed=case.seed)
