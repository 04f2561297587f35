import pytest
from hypothesis import given, settings
from tests.kernels.test_cpu_emulation import gpu_constants, short_cases, emulated_gpu
from tests.property.strategies import pinned_cases, pinned_quantized_cases
from tests.property.test_online_softmax_parity import check_parity
from tests.property.test_batch_invariance import _check_requests

VARS = [dict(SINGLE_PASS_STEPS_AHEAD=2), dict(SINGLE_PASS_STEPS_AHEAD=3, SINGLE_PASS_KEY_BYTES_IN_FLIGHT=32),
        dict(STEPS_AHEAD=2, SINGLE_PASS_MAX_S=0), dict(STEPS_AHEAD=3, SINGLE_PASS_MAX_S=0)]

@pytest.mark.parametrize("var", VARS, ids=str)
@settings(max_examples=12, deadline=None)
@given(case=short_cases())
def test_knob(var, case):
    with emulated_gpu(), gpu_constants(**var):
        check_parity(case, "cuda")
        _check_requests(case, "cuda")
