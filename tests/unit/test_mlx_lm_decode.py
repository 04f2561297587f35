"""fusedattend.benchmarks.mlx_lm_decode's greedy_steps, which tests/perf's mlx_lm rows also use: as many steps
as asked, the tokens a step-at-a-time loop gives, and ms_per_token leaves the caches as it found them."""

import mlx.core as mx
import pytest

pytest.importorskip("mlx_lm")
from mlx_lm.models import llama  # noqa: E402

from fusedattend.benchmarks import mlx_lm_decode as decode_script  # noqa: E402


@pytest.fixture(autouse=True)
def on_the_cpu():
    """The step loop's bookkeeping is what is tested, on the CPU stream: mlx_lm's own 4-bit
    QuantizedKVCache decode raises on MLX 0.32.4's CUDA backend ("[quantized_matmul] No
    implementation for problem shape")."""
    with mx.stream(mx.cpu):
        yield


@pytest.fixture(scope="module")
def model():
    mx.random.seed(0)
    m = llama.Model(llama.ModelArgs(model_type="llama", hidden_size=128, num_hidden_layers=2, intermediate_size=64,
                                    num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-5, vocab_size=32))
    mx.eval(m.parameters())
    return m


def one_at_a_time(model, caches, batch, steps):
    y = mx.zeros((batch,), dtype=mx.int32)
    for _ in range(steps):
        y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
        mx.eval(y)
    return y


@pytest.mark.parametrize("quantized", [False, True])
def test_greedy_steps_takes_the_steps_asked(model, quantized):
    def filled():  # the same random keys and values each time
        mx.random.seed(1)
        return decode_script.filled_caches(model, 2, 5, quantized)

    expected = one_at_a_time(model, filled(), 2, 3)
    caches = filled()
    y = decode_script.greedy_steps(model, caches, 2, 3)
    assert [c.offset for c in caches] == [8, 8]
    assert mx.array_equal(y, expected)
    assert decode_script.greedy_steps(model, caches, 2, 0) is None and caches[0].offset == 8


def test_ms_per_token_trims_back(model):
    caches = decode_script.filled_caches(model, 1, 5, False)
    assert decode_script.ms_per_token(model, caches, 1, steps=2, warmup=1) > 0
    assert [c.offset for c in caches] == [5, 5]


def test_timed_keeps_every_round(model):
    model = llama.Model(model.args)
    model.set_dtype(mx.bfloat16)  # the caches' dtype, which the patched attention asks of the queries
    every_round = {}
    result = decode_script.timed(model, lambda: decode_script.filled_caches(model, 1, 5, False), 1, steps=1,
                                 warmup=0, rounds=3, every_round=every_round)
    assert set(every_round) == set(result) == {"mlx_lm", "fusedattend", "no attention"}
    for impl, times in every_round.items():
        assert len(times) == 3 and result[impl] == sorted(times)[1]


def test_table_cell_shows_the_rounds_range():
    assert decode_script.with_range(9.35, [9.6, 9.35, 9.21]) == "9.35 (9.21-9.60)"
    assert decode_script.with_range(9.35, [9.35]) == "9.35"
    assert decode_script.with_range("RuntimeError: no", None) == "RuntimeError: no"
