"""Batch invariance, bit for bit (mx.array_equal, no tolerance).

1. The 5-D layer call equals stacking the NL per-layer 4-D calls.
2. The B-batched call equals the per-request calls: request b alone, with its own slice of the
   mask and its own key_ranges row.
Both for decode_attention and quantized_decode_attention. A kernel whose reduction order or
split depends on NL or B (or on the neighbours' lengths) fails here even when it is accurate.
"""

import mlx.core as mx
from hypothesis import given

from tests.property.strategies import (
    attention_cases, examples, pinned, pinned_cases, pinned_layered_cases, pinned_quantized_cases,
    quantized_cases, request_key_ranges, run_case,
)

PLAIN_EDGES, LAYERED_EDGES, QUANTIZED_EDGES = pinned_cases(), pinned_layered_cases(), pinned_quantized_cases()


def _take(x, axis, i, size):
    """x[..., i, ...] along `axis` (counted from the right-aligned full shape) when that axis is
    full-size; the broadcast axis (size 1) stays; keepdims."""
    if x.shape[axis] == size:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(i, i + 1)
        return x[tuple(idx)]
    return x


def _mask_for_request(mask, b, B):
    """The mask of request b for a 4-D call."""
    if mask is None or isinstance(mask, str) or mask.ndim < 4:
        return mask
    return _take(mask, mask.ndim - 4, b, B)


def _mask_for_layer(mask, l, NL):
    if mask is None or isinstance(mask, str) or mask.ndim < 5:
        return mask
    return (mask[l] if mask.shape[0] == NL else mask[0])


def _kv_index(kv, fn):
    return tuple(fn(a) for a in kv) if isinstance(kv, tuple) else fn(kv)


def _check_layers(case, backend):
    NL = case.dims[0]
    whole = run_case(case, backend)
    per = [
        run_case(
            case, backend, q=case.q[l], k=_kv_index(case.k, lambda a: a[l]), v=_kv_index(case.v, lambda a: a[l]),
            mask=_mask_for_layer(case.mask, l, NL),
        )
        for l in range(NL)
    ]
    assert mx.array_equal(whole, mx.stack(per)), f"5-D call != stacked 4-D calls: {case}"


def _check_requests(case, backend):
    B = case.dims[1]
    if case.layered:  # per-request calls of the 5-D form: slice axis 1
        sl = lambda a, b: a[:, b:b + 1]
        msl = lambda m, b: m if (m is None or isinstance(m, str) or m.ndim < 4) else _take(m, m.ndim - 4, b, B)
    else:
        sl = lambda a, b: a[b:b + 1]
        msl = lambda m, b: _mask_for_request(m, b, B)
    whole = run_case(case, backend)
    for b in range(B):
        one = run_case(
            case, backend, q=sl(case.q, b), k=_kv_index(case.k, lambda a: sl(a, b)),
            v=_kv_index(case.v, lambda a: sl(a, b)), mask=msl(case.mask, b),
            key_ranges=request_key_ranges(case.key_ranges, b, case.dims[5]),
        )
        assert mx.array_equal(sl(whole, b), one), f"request {b} alone != its slice of the batch: {case}"


@pinned(LAYERED_EDGES)
@examples(5)
@given(case=attention_cases(layered=True))
def test_layer_call_equals_stacked_layers(case, backend):
    _check_layers(case, backend)


@pinned(PLAIN_EDGES)
@examples(5)
@given(case=attention_cases(max_B=4))
def test_batch_equals_per_request(case, backend):
    _check_requests(case, backend)


@examples(5)
@given(case=quantized_cases(layered=True))
def test_quantized_layer_call_equals_stacked_layers(case, backend):
    _check_layers(case, backend)


@pinned(QUANTIZED_EDGES)
@examples(5)
@given(case=quantized_cases())
def test_quantized_batch_equals_per_request(case, backend):
    _check_requests(case, backend)
