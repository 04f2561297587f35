"""Batch invariance, bit for bit (no tolerance): conformance.properties' layer_invariance and
batch_invariance on this suite's cases.

1. The 5-D layer call equals stacking the NL per-layer 4-D calls (each with its layer's mask).
2. The B-batched call equals the per-request calls: request b alone, with its own slice of the
   mask and its own key_ranges row, with a layer axis or without.
Both for decode_attention and quantized_decode_attention. A kernel whose reduction order or
split depends on NL or B (or on the neighbours' lengths) fails here even when it is accurate.
"""

from hypothesis import given

from tests.property.conformance_adapter import check
from tests.property.strategies import (
    attention_cases, examples, pinned, pinned_cases, pinned_layered_cases, pinned_quantized_cases,
    quantized_cases,
)

PLAIN_EDGES, LAYERED_EDGES, QUANTIZED_EDGES = pinned_cases(), pinned_layered_cases(), pinned_quantized_cases()


@pinned(LAYERED_EDGES)
@examples(5)
@given(case=attention_cases(layered=True))
def test_layer_call_equals_stacked_layers(case, backend):
    check("layer_invariance", case, backend)


@pinned(PLAIN_EDGES)
@examples(5)
@given(case=attention_cases(max_B=4))
def test_batch_equals_per_request(case, backend):
    check("batch_invariance", case, backend)


@examples(5)
@given(case=quantized_cases(layered=True))
def test_quantized_layer_call_equals_stacked_layers(case, backend):
    check("layer_invariance", case, backend)


@pinned(QUANTIZED_EDGES)
@examples(5)
@given(case=quantized_cases())
def test_quantized_batch_equals_per_request(case, backend):
    check("batch_invariance", case, backend)
