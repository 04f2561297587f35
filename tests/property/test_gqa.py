"""GQA and key-order properties.

* GQA == MHA with K/V repeated (conformance.properties' gqa): query head h reads kv head
  h // (H_q // H_kv), so the call with mx.repeat(K, G, axis=head) (and V likewise) gives the
  same output within twice the parity bound (a kernel may group the G query heads of one kv
  head into one matmul, which changes the blocking). Parity on the same case keeps it honest:
  a kernel that read the same wrong kv head in both calls would agree with itself.
* Permuting key and value positions together (and the mask's key axis) changes nothing but
  the summation order: within twice the parity tolerance. Causal masks and key_ranges are
  position-dependent, so they are first turned into the equivalent explicit mask.
"""

import mlx.core as mx
import numpy as np
from hypothesis import given, target
from hypothesis import strategies as st

from fusedattend.conformance import oracle
from tests.property.conformance_adapter import check
from tests.property.strategies import examples, attention_cases, oracle_of, quantized_cases, run_case, to_mx, to_np


def _close(a, b, case, what):
    expected, stats = oracle_of(case)
    tol = 2 * oracle.parity_tolerance(expected, stats, case.dtype_name, case.dims[-1])
    ratio, err = oracle.compare(to_np(a), to_np(b).astype(np.float64), tol)
    target(min(ratio, 1e6), label=what)
    assert ratio <= 1.0, f"{what}: err {err:.3g} = {ratio:.3g}x tolerance: {case}"
    r2, _ = oracle.compare(to_np(a), expected, tol)
    assert r2 <= 1.0, f"{what}: off the oracle: {case}"


def check_gqa(case, backend):
    check("gqa", case, backend)
    check("parity", case, backend)


@examples(3)
@given(case=attention_cases())
def test_gqa_equals_mha_with_repeated_kv(case, backend):
    check_gqa(case, backend)


@examples(3)
@given(case=quantized_cases())
def test_quantized_gqa_equals_mha_with_repeated_kv(case, backend):
    check_gqa(case, backend)


@examples(3)
@given(case=attention_cases(), seed=st.integers(0, 2**32 - 1))
def test_key_permutation_invariance(case, backend, seed):
    NL, B, H_q, H_kv, L, S, D = case.dims
    vis = oracle.visibility((NL, B, H_q, L, D), S, case.np_mask(), case.np_key_ranges())
    vis = vis if case.layered else vis[0]
    if case.mask_kind == "additive":
        add = to_np(case.mask)
        add = np.broadcast_to(add.reshape((1,) * (vis.ndim - add.ndim) + add.shape), vis.shape)
        explicit = np.where(vis, add, -np.inf)
        as_mx = lambda m: to_mx(m, case.mask.dtype)
    else:
        explicit = vis
        as_mx = mx.array
    base = run_case(case, backend, mask=as_mx(explicit), key_ranges=None)
    perm = np.random.default_rng(seed).permutation(S)
    idx = mx.array(perm)
    k = mx.take(case.k, idx, axis=case.k.ndim - 2)
    v = mx.take(case.v, idx, axis=case.v.ndim - 2)
    permuted = run_case(case, backend, k=k, v=v, mask=as_mx(explicit[..., perm]), key_ranges=None)
    _close(permuted, base, case, "permuted keys")
