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
from hypothesis import given
from hypothesis import strategies as st

from fusedattend.conformance import oracle
from tests.property.conformance_adapter import check
from tests.property.strategies import (
    attention_cases, examples, pinned, pinned_cases, pinned_quantized_cases, quantized_cases, to_np,
)

PLAIN_EDGES, QUANTIZED_EDGES = pinned_cases(), pinned_quantized_cases()


def check_parity(case, backend):
    """conformance.properties' parity (the rows that see a key, output shape and dtype) and
    fully_masked_row (the rows that see none: exact zeros, fusedattend's choice): every row
    at the oracle."""
    check("parity", case, backend)
    check("fully_masked_row", case, backend)


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


# The range a result stays finite in: every backend accumulates weight x value in float32 with
# weights of at most 1 (exp(s - max)) before it divides by their sum, so the accumulator is at
# most S * max|V|: finite whenever S * max|V| <= FLT_MAX. The README's semantics table states
# this bound; past it a result may be +-inf where MLX's SDPA, which normalises first, is finite.
FLT_MAX = float(np.finfo(np.float32).max)


@examples(2)
@given(S=st.sampled_from([1, 2, 3, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 2049]),
       dtype_name=st.sampled_from(["float32", "bfloat16"]), same_sign=st.booleans(),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_values_up_to_the_finite_bound_stay_finite(S, dtype_name, same_sign, causal, seed, backend):
    import mlx.core as mx

    import fusedattend as fa

    dtype = getattr(mx, dtype_name)
    rng = np.random.default_rng(seed)
    B, H_q, H_kv, L, D = 1, 4, 2, 2, 64
    q = mx.array(rng.standard_normal((B, H_q, L, D), dtype=np.float32)).astype(dtype)
    k = mx.array(rng.standard_normal((B, H_kv, S, D), dtype=np.float32)).astype(dtype)
    # |V| as large as the bound lets it be, after rounding to the dtype (never rounded up past it).
    largest = mx.array(FLT_MAX / S * (1 - 2**-7), dtype=mx.float32).astype(dtype)
    signs = np.ones((B, H_kv, S, D), np.float32) if same_sign else rng.choice([-1.0, 1.0], (B, H_kv, S, D))
    v = mx.array(signs).astype(dtype) * largest
    assert float(mx.max(mx.abs(v.astype(mx.float32)))) * S <= FLT_MAX
    out = fa.decode_attention(q, k, v, mask="causal" if causal else None, backend=backend)
    got = to_np(out)
    assert np.isfinite(got).all(), f"S = {S}, |V| = {float(largest):.3g}: {np.sum(~np.isfinite(got))} non-finite"
    expected = oracle.attention(to_np(q), to_np(k), to_np(v), mask="causal" if causal else None)
    # A weighted mean of the values: within their range, and at the oracle within float32's
    # relative accuracy of the largest value (the parity bound's N and D terms, scaled).
    assert np.abs(got).max() <= float(largest) * (1 + 2**-7)
    assert np.abs(got - expected).max() <= float(largest) * (4 * (S + D + 8) * 2**-24 + 2**-7)
