"""Online-softmax parity: every backend within a derived tolerance of fusedattend/conformance/oracle.py (float64).

Tolerance (fusedattend.conformance.oracle.parity_tolerance), per output element:
  The oracle gets the very same rounded f32/f16/bf16 inputs (converted exactly to float64), so
  input rounding is not an error source. What remains, with u32 = 2^-24 (float32 unit
  roundoff), A = the row's largest |score| (or scale * sum_d |q_d k_d|, plus |additive mask|),
  N = number of visible keys, V = the row's largest visible |v|:
    - each score is a length-D float32 dot product, scaled and masked: |ds| <= (D+3) u32 A;
    - exp(s - max) turns that into a relative weight error <= 2|ds| (+ a few u32);
    - numerator and denominator are N-term float32 sums, relative error <= N u32 each
      (any summation order, online rescaling included, stays within this bound);
    so the float32 result y obeys |y - o| <= V (2 (D+3) A + 2 N + 8) u32, times a slack of 4
    for fast exp / exp2 rewrites and blocked (split-S) reductions;
    - rounding y to the output dtype adds half an ulp of |y|: <= u_dtype (|o| + |y - o|),
      u_dtype = 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16).
  A dtype-rounding-only error therefore reaches err/tol ~ 1 on bf16 outputs near a rounding
  boundary; anything that is not float32-accurate (bf16 accumulation, a wrong scale, a wrong
  key) exceeds it. hypothesis.target(err/tol) climbs toward the worst case.
"""

import numpy as np
from hypothesis import given, target
from hypothesis.control import currently_in_test_context

from fusedattend.conformance import oracle
from tests.property.strategies import (
    attention_cases, examples, oracle_of, pinned, pinned_cases, pinned_quantized_cases, quantized_cases,
    run_case, to_np,
)

PLAIN_EDGES, QUANTIZED_EDGES = pinned_cases(), pinned_quantized_cases()


def check_parity(case, backend):
    out = run_case(case, backend)
    assert out.dtype == case.dtype
    assert tuple(out.shape) == tuple(case.q.shape)
    expected, stats = oracle_of(case)
    tol = oracle.parity_tolerance(expected, stats, case.dtype_name, case.dims[-1])
    ratio, err = oracle.compare(to_np(out), expected, tol)
    if currently_in_test_context():  # (also called from plain tests: tests/kernels)
        target(min(ratio, 1e6), label="err/tol")
    assert ratio <= 1.0, f"max err {err:.3g} is {ratio:.3g}x the tolerance: {case}"


@pinned(PLAIN_EDGES)
@examples(8)
@given(case=attention_cases())
def test_matches_oracle(case, backend):
    check_parity(case, backend)


@examples(8)
@given(case=attention_cases(L=1, mask_kinds=("none", "bool", "additive")))
def test_matches_oracle_decode_row(case, backend):
    check_parity(case, backend)


@pinned(QUANTIZED_EDGES)
@examples(8)
@given(case=quantized_cases())
def test_quantized_matches_oracle(case, backend):
    """The oracle dequantizes the very codes/scales/biases in float64, so the same bound holds."""
    check_parity(case, backend)
