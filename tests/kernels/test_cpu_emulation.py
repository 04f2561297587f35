"""The GPU kernels' logic, checked where there is no GPU: fusedattend.gpu with every metal/ body
compiled for the host and run one fiber per GPU thread (tests/kernels/cpu_emulator.py).

The same properties as on a GPU, on small shapes: parity with the float64 oracle (pinned
schedule edges and drawn cases), and bit-exact batch and layer invariance; also for the
single-pass launch (gpu.SINGLE_PASS_MAX_S), off by default until timed on a GPU, and the
fused merge against the separate merge kernel. A change to a kernel
is checked here, CI included, before it reaches a GPU.
"""

import contextlib

import mlx.core as mx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusedattend import gpu
from tests.kernels.cpu_emulator import compiler_available, emulated_gpu
from tests.property.strategies import (
    attention_cases, edge_case, examples, pinned, pinned_cases, pinned_layered_cases, pinned_quantized_cases,
    quantized_cases, run_case,
)
from tests.property.test_batch_invariance import _check_layers, _check_requests
from tests.property.test_online_softmax_parity import check_parity

pytestmark = pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")

# Short S around the key-block size (gpu.MIN_BLOCK = 128) and the step of 16 keys.
SHORT_S = (1, 2, 3, 15, 17, 63, 127, 128, 129, 255, 257)
# The suites' NL = 1 edge, and a shorter multi-layer one than theirs (S = 1024 runs slowly here).
LAYERED = pinned_layered_cases()[:1] + [edge_case(NL=3, B=2, S=130, L=3, layered=True, mask="bool_hidden_row")]


@st.composite
def short_cases(draw, layered=None):
    """Plain or quantized cases of every kind the suites draw, with short key sequences."""
    S = draw(st.sampled_from(SHORT_S))
    if draw(st.booleans()):
        return draw(quantized_cases(S=S, layered=layered))
    return draw(attention_cases(S=S, layered=layered, max_B=2, max_NL=2))


@pinned(pinned_cases() + pinned_quantized_cases() + LAYERED)
@examples(0.4)
@given(case=short_cases())
def test_emulated_kernels_match_oracle(case):
    with emulated_gpu():
        check_parity(case, "cuda")


@examples(0.2)
@given(case=short_cases())
def test_emulated_batch_equals_per_request(case):
    with emulated_gpu():
        _check_requests(case, "cuda")


@pinned(LAYERED)
@examples(0.2)
@given(case=short_cases(layered=True))
def test_emulated_layer_call_equals_stacked_layers(case):
    with emulated_gpu():
        _check_layers(case, "cuda")


@contextlib.contextmanager
def gpu_constants(**values):
    saved = {name: getattr(gpu, name) for name in values}
    for name, value in values.items():
        setattr(gpu, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gpu, name, value)


@pinned(pinned_cases()[:3] + pinned_quantized_cases())
@examples(0.2)
@given(case=short_cases())
def test_emulated_fused_merge_equals_two_launches(case):
    """The blocks merged by the last one to finish (the default) give the very output of the
    separate merge kernel (merge_partials.metal): the same states merged in the same order."""
    with emulated_gpu():
        fused = run_case(case, "cuda")
        with gpu_constants(FUSED_MERGE=False):
            two = run_case(case, "cuda")
    assert mx.array_equal(fused, two), f"fused merge != two launches: {case}"


@examples(0.2)
@given(case=short_cases())
def test_emulated_single_pass(case):
    """gpu.SINGLE_PASS_MAX_S on (one block takes every key, no merge): oracle parity and batch
    invariance, and where the default also has a single block (S <= MIN_BLOCK), its very output."""
    with emulated_gpu():
        default = run_case(case, "cuda")
        with gpu_constants(SINGLE_PASS_MAX_S=4096):
            check_parity(case, "cuda")
            _check_requests(case, "cuda")
            one = run_case(case, "cuda")
    if case.dims[5] <= gpu.MIN_BLOCK:
        assert mx.array_equal(one, default), f"single pass != default with one block: {case}"
