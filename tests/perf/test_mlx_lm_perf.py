"""Decode steps of an mlx_lm model, patched (`fusedattend.patch_mlx_lm`), against mlx_lm's own
attention timed in the same run (GPU backends only).

The model has Llama-3-8B's attention (hidden 4096, 32 query heads over 8 kv heads of D = 128)
in 4 layers, with a small MLP (1024) and vocabulary (1024), so that attention is most of a step.
Its caches are mlx_lm's own, filled with S random keys. A round takes STEPS greedy steps as
mlx_lm's generate_step does (each step sent with mx.async_eval before the step before's token is
read: fusedattend.benchmarks.mlx_lm_decode.greedy_steps), and trims the caches back to S. The stored time is
a round's; `calls_per_round` is STEPS, so a "call" is a model step. Up to H200 baseline 0039 and
H100 0001 a round queued all STEPS steps and evaluated them once. MLX's CUDA backend then built
CUDA graphs anew every round (cudaGraphInstantiate: 7.9 ms of host time in a 4-bit round, 4.9 in a
bf16 one), and the 4-bit rows read 0.30-0.50x mlx_lm's bf16 step on an H100, while a 32-layer
model generating tokens took 7.67 ms a token over a 4-bit cache against 7.22 over a bf16 one
(commit d205b41: docs/h100/quantized-steps/).
"""

import statistics

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend.benchmarks import harness as bench
from tests.perf.test_decode_perf import _benchmark_stat

pytest.importorskip("mlx_lm")
from mlx_lm.models import llama  # noqa: E402

# The caches of the mlx_lm decode benchmark (its random fills, its --padded batch, its 4-bit format).
from fusedattend.benchmarks import mlx_lm_decode as decode_script  # noqa: E402

ON_GPU = mx.default_device() == mx.gpu
LAYERS, STEPS, ROUNDS = 4, 8, 11
BITS, GROUP_SIZE = decode_script.BITS, decode_script.GROUP_SIZE
CASES = [("KVCache", 1, 2048), ("KVCache", 1, 32768), ("KVCache", 8, 8192), ("QuantizedKVCache", 1, 8192),
         ("QuantizedKVCache", 8, 8192), ("BatchKVCache", 8, 8192), ("BatchKVCache", 32, 2048)]


@pytest.fixture(scope="module")
def model():
    # After the rest of the perf suite, MLX's and torch's caches held so much of the GPU that
    # these rows failed allocating (cudaGraphInstantiate: out of memory; commit d205b41: docs/h200/key-ranges/).
    bench.release_memory()
    args = llama.ModelArgs(model_type="llama", hidden_size=4096, num_hidden_layers=LAYERS, intermediate_size=1024,
                           num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, vocab_size=1024)
    m = llama.Model(args)
    m.set_dtype(mx.bfloat16)
    mx.eval(m.parameters())
    return m


def request_lengths(kind, B, S):
    return decode_script.padded_lengths(B, S) if kind == "BatchKVCache" else [S] * B


def make_caches(model, kind, B, S):
    """One mlx_lm cache a layer, holding S random keys and values a request (fewer, left-padded,
    in a BatchKVCache)."""
    if kind == "BatchKVCache":
        return decode_script.padded_caches(model, B, S)
    return decode_script.filled_caches(model, B, S, kind == "QuantizedKVCache")


def steps_round(model, caches, B):
    """STEPS greedy steps as mlx_lm's generate_step takes them, and the caches trimmed back."""
    decode_script.greedy_steps(model, caches, B, STEPS)
    for cache in caches:
        cache.trim(STEPS)


def step_seconds(model, caches, B):
    """mlx_lm's protocol as ours: a warm-up round, then the median of ROUNDS; seconds a step."""
    return statistics.median(bench.time_call(lambda: steps_round(model, caches, B), repeats=ROUNDS)) / STEPS


@pytest.mark.perf
@pytest.mark.parametrize("kind,B,S", CASES, ids=[f"{kind}-B{B}-S{S}" for kind, B, S in CASES])
def test_mlx_lm_step(benchmark, backend, request, kind, B, S):
    if not ON_GPU or backend == "reference":
        pytest.skip("mlx_lm model steps: GPU backends only")
    model = request.getfixturevalue("model")
    caches = make_caches(model, kind, B, S)
    info = benchmark.extra_info
    try:
        info["ratio_mlx_lm"] = step_seconds(model, caches, B)
    except Exception as err:  # mlx_lm's quantized attention on CUDA
        info["mlx_lm"] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
        caches = make_caches(model, kind, B, S)  # the failed steps' lazy arrays stay in the old ones
    if kind == "QuantizedKVCache":
        info["ratio_mlx_lm.bf16"] = step_seconds(model, make_caches(model, "KVCache", B, S), B)
    restore = fa.patch_mlx_lm(backend=backend)
    try:
        benchmark.group = f"mlx_lm step {kind} B={B} S={S}"
        benchmark.pedantic(lambda: steps_round(model, caches, B), rounds=ROUNDS, iterations=1, warmup_rounds=1)
        median = _benchmark_stat(benchmark, "median")
        seconds = (median if median is not None else step_seconds(model, caches, B) * STEPS) / STEPS
    finally:
        restore()
    keys = sum(request_lengths(kind, B, S)) * LAYERS
    element_bytes = BITS / 8 + 2 * 2 / GROUP_SIZE if kind == "QuantizedKVCache" else 2  # codes, scale and bias
    kv_bytes = keys * 8 * 128 * 2 * element_bytes
    for peer in [k for k in info if k.startswith("ratio_")]:
        info[peer] /= seconds
    info.update(backend=backend, format="q4" if kind == "QuantizedKVCache" else "bfloat16", kind=kind, B=B, S=S,
                layers=LAYERS, kv_bytes=int(kv_bytes),
                calls_per_round=STEPS, gbps=kv_bytes / seconds / 1e9)
