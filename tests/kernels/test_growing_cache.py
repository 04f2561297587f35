"""A decode loop's cache grows a key a step, and its calls are replayed (backends.replay): the
launches must follow S across the schedule's edges (one block to split blocks, and each change in
the number of blocks).

FlashInfer's way: the oracle of each step is the same call set up afresh (backends.forget_replays():
checks, schedule and kernels made again), and the two must be bit-identical. On a GPU backend
(--backend metal|cuda) at the shipped schedule; on the CPU emulation of the kernels (CI
included) with blocks of 32 keys and one block up to 20, so that short caches cross every edge.
"""

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend import _problem, backends, gpu
from fusedattend.benchmarks.harness import first_keys
from tests.kernels.cpu_emulator import compiler_available, emulated_gpu
from tests.kernels.policy_override import policy_override


def _grown_outputs(steps, quantized, D, backend, seed=0):
    """Each step's output of one decode loop: K/V the first S keys of one preallocated cache (mlx_lm's
    slices), the queries new each step; then each step's call again, set up afresh."""
    B, H_q, H_kv = 2, 8, 2
    keys = mx.random.split(mx.random.key(seed), 2 + len(steps))
    k, v = (mx.random.normal((B, H_kv, max(steps) + 3, D), key=key).astype(mx.bfloat16) for key in keys[:2])
    queries = [mx.random.normal((B, H_q, 1, D), key=key).astype(mx.bfloat16) for key in keys[2:]]
    if quantized:
        k, v = fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)

    def step(q, S):
        if quantized:
            return fa.quantized_decode_attention(q, first_keys(k, S), first_keys(v, S), group_size=32, backend=backend)
        return fa.decode_attention(q, first_keys(k, S), first_keys(v, S), backend=backend)

    backends.forget_replays()
    _problem._CHECKED.clear()
    grown = [step(q, S) for q, S in zip(queries, steps)]
    mx.eval(grown)
    fresh = []
    for q, S in zip(queries, steps):
        backends.forget_replays()
        fresh.append(step(q, S))
        mx.eval(fresh[-1])
    return grown, fresh


def _check_grown(steps, quantized, D, backend):
    grown, fresh = _grown_outputs(steps, quantized, D, backend)
    for S, out, want in zip(steps, grown, fresh):
        assert mx.array_equal(out, want).item(), f"S = {S}: the replayed call differs from a fresh one"


# The shipped schedule: one block up to Policy.single_pass_max_s (512), then 4-bit blocks of 256 keys
# (the count changing at 769 and 1025), plain matrix blocks of 1024 (at 1025).
GPU_STEPS = [510, 511, 512, 513, 514, 768, 769, 1024, 1025, 1026, 700]


@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "q4"])
def test_growing_cache_on_the_gpu(backend, quantized):
    if backend not in ("metal", "cuda"):
        pytest.skip("GPU kernels only")
    _check_grown(GPU_STEPS, quantized, 128, backend)


# Emulated: one block up to 20 keys, then blocks of 32 (the count changing at 33 and 65).
EMULATED_STEPS = [19, 20, 21, 22, 32, 33, 34, 64, 65, 21]


@pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")
@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "q4"])
def test_growing_cache_emulated(quantized):
    with emulated_gpu(), policy_override(single_pass_max_s=20, min_block=32, max_block=32):
        _check_grown(EMULATED_STEPS, quantized, 32, "cuda")
