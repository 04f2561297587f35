"""Determinism: conformance.properties' determinism on this suite's cases (plain and quantized):
two identical calls, and a call on freshly copied inputs (no cached graph or buffer shared),
give the same bits. A kernel that reads uninitialised scratch or races fails here.
"""

from hypothesis import given

from tests.property.conformance_adapter import check
from tests.property.strategies import attention_cases, examples, quantized_cases


@examples(2)
@given(case=attention_cases())
def test_repeated_call_bit_identical(case, backend):
    check("determinism", case, backend)


@examples(2)
@given(case=quantized_cases())
def test_quantized_repeated_call_bit_identical(case, backend):
    check("determinism", case, backend)
