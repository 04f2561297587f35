"""mlx_lm's batched generation patched (`fusedattend.patch_mlx_lm`): left-padded requests in a
BatchKVCache, their padding passed to the kernels as key ranges instead of a mask.

The oracle of the batched step is the per-request loop: each request alone, over a KVCache of
its own keys, must give the same bits. mlx_lm's semantics (its boolean mask) are checked against
float64 attention (fusedattend.conformance.oracle), and mlx_lm's BatchGenerator end to end against the same model
with float64 attention in its place.
"""

import mlx.core as mx
import numpy as np
import pytest

pytest.importorskip("mlx_lm")
import mlx_lm.models.llama as llama  # noqa: E402
from mlx_lm.models.cache import BatchKVCache, KVCache  # noqa: E402

import fusedattend  # noqa: E402
from fusedattend import mlx_lm_attention  # noqa: E402
from fusedattend.conformance import oracle  # noqa: E402
from fusedattend.conformance.grids import np_of  # noqa: E402
from tests.integration.test_mlx_lm_models import (  # noqa: E402
    PROMPT_TOLERANCE,
    VOCAB,
    assert_close,
    oracle_attention,
    small_llama,
)

H_Q, H_KV, D = 8, 2, 64
# Of the largest output, against float64 attention: float32 rounding, and half a bfloat16 step.
OUTPUT_TOLERANCE = {mx.float32: 1e-5, mx.bfloat16: 8e-3}

# (keys each request holds before the step, query rows L): S = 1 beside long ones, 256 (mlx_lm's
# buffer step) and its neighbours, a request with no padding, L up to the fused kernels' 8.
STEPS = [((1, 7, 64), 1), ((255, 256, 257), 1), ((40, 3), 3), ((8, 1, 17, 9), 8), ((5,), 1)]


def requests_and_batch(lengths, dtype, seed):
    """Per request a KVCache of its own random keys; the left-padded BatchKVCache that mlx_lm's
    merge makes of them (as BatchGenerator does when requests join)."""
    alone = []
    for b, n in enumerate(lengths):
        k, v = (mx.random.normal((1, H_KV, n, D), key=mx.random.key(seed * 100 + 2 * b + j)).astype(dtype)
                for j in (0, 1))
        cache = KVCache()
        cache.update_and_fetch(k, v)
        alone.append(cache)
    return alone, BatchKVCache.merge(alone)


def step_inputs(B, L, dtype, seed):
    q, k, v = (mx.random.normal((B, h, L, D), key=mx.random.key(seed * 100 + 90 + i)).astype(dtype)
               for i, h in enumerate((H_Q, H_KV, H_KV)))
    return q, k, v


def attend(cache, q, k, v, backend, window_size=None):
    """One layer's step as mlx_lm's models take it (base.create_attention_mask): the mask made
    first, then the cache updated."""
    mask = cache.make_mask(q.shape[-2], return_array=False, window_size=window_size)
    keys, values = cache.update_and_fetch(k, v)
    out = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, cache, D**-0.5, mask, backend=backend)
    return out, keys, values, mask


@pytest.mark.parametrize("lengths, L", STEPS, ids=[f"{'-'.join(map(str, n))}_L{L}" for n, L in STEPS])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_batched_step_is_each_request_alone(lengths, L, dtype, backend, patched):
    alone, batch = requests_and_batch(lengths, dtype, seed=len(lengths) + L)
    q, k, v = step_inputs(len(lengths), L, dtype, seed=L)
    out, keys, values, mask = attend(batch, q, k, v, backend)
    for b, cache in enumerate(alone):
        own, *_ = attend(cache, q[b:b + 1], k[b:b + 1], v[b:b + 1], backend)
        assert mx.array_equal(out[b:b + 1], own), f"request {b} differs from itself alone"
    expected = oracle.attention(np_of(q), np_of(keys), np_of(values), scale=D**-0.5, mask=np.array(mask))
    assert_close(np_of(out), expected, OUTPUT_TOLERANCE[dtype])


def passed_on(monkeypatch):
    """The mask and key_ranges each decode_attention call of the patched function receives."""
    seen = []
    real = mlx_lm_attention.decode_attention

    def spy(*args, mask=None, key_ranges=None, **kwargs):
        S = args[1].shape[-2]
        seen.append((mask, None if key_ranges is None else [list(pair) for pair in key_ranges.pairs_for(S)]))
        return real(*args, mask=mask, key_ranges=key_ranges, **kwargs)

    monkeypatch.setattr(mlx_lm_attention, "decode_attention", spy)
    return seen


@pytest.mark.parametrize("L, causal", [(1, None), (3, "causal")])
def test_padding_goes_as_key_ranges(L, causal, monkeypatch, patched):
    """The kernels get (left_padding, S - left_padding) a request and no mask array."""
    seen = passed_on(monkeypatch)
    _, batch = requests_and_batch((6, 2, 9), mx.float32, seed=3)
    attend(batch, *step_inputs(3, L, mx.float32, seed=3), None)
    S = 9 + L
    assert seen == [(causal, [[3, S - 3], [7, S - 7], [0, S]])]


def test_padding_ranges_are_not_read_back(backend, forbid_key_ranges_read, patched):
    """The ranges are a KeyRanges, checked as make_mask notes them; a layer's call does not read
    them back on the host (each read would move their page away from the GPU). Same bits as the
    same ranges as an array, read back."""
    _, batch = requests_and_batch((6, 2, 9), mx.float32, seed=6)
    inputs = step_inputs(3, 1, mx.float32, seed=6)
    mask = batch.make_mask(1, return_array=False)
    keys, values = batch.update_and_fetch(*inputs[1:])
    ranges = mlx_lm_attention.padding_key_ranges(mask, keys)
    read_back = fusedattend.decode_attention(inputs[0], keys, values, scale=D**-0.5,
                                             key_ranges=mx.array(ranges.pairs_for(keys.shape[-2])), backend=backend)
    forbid_key_ranges_read()
    for _ in range(2):  # two layers' calls over the same mask
        out = mlx_lm_attention.scaled_dot_product_attention(inputs[0], keys, values, batch, D**-0.5, mask,
                                                            backend=backend)
        assert mx.array_equal(out, read_back)


def test_padding_ranges_kept_across_steps(patched):
    """Step after step, as the cache grows, the same KeyRanges.from_padding (one array on the
    GPU for every step) stands for the padding; a request joining makes a new one."""
    _, batch = requests_and_batch((6, 2, 9), mx.float32, seed=8)

    def step(seed):
        mask = batch.make_mask(1, return_array=False)
        keys, _ = batch.update_and_fetch(*step_inputs(3, 1, mx.float32, seed=seed)[1:])
        return mlx_lm_attention.padding_key_ranges(mask, keys)

    first = step(8)
    assert first is not None and step(9) is first and step(10) is first
    batch.left_padding = batch.left_padding + 1  # what a change of the batch's requests does to it
    assert step(11) is not first


def test_padding_past_the_keys_stays_a_mask(patched):
    """Left padding longer than the keys cannot be key ranges: nothing is noted, the mask stays."""
    _, batch = requests_and_batch((6, 2), mx.float32, seed=7)
    batch.left_padding = batch.left_padding + 100
    mask = batch.make_mask(1, return_array=False)
    keys, _ = batch.update_and_fetch(*step_inputs(2, 1, mx.float32, seed=7)[1:])
    assert isinstance(mask, mx.array) and mlx_lm_attention.padding_key_ranges(mask, keys) is None


def test_windowed_mask_stays_a_mask(backend, monkeypatch, patched):
    """A mask with a window hides more than the padding: it is passed on as it is."""
    seen = passed_on(monkeypatch)
    _, batch = requests_and_batch((6, 30, 11), mx.float32, seed=4)
    q, k, v = step_inputs(3, 2, mx.float32, seed=4)
    out, keys, values, mask = attend(batch, q, k, v, backend, window_size=8)
    assert seen[0][1] is None and isinstance(seen[0][0], mx.array)
    expected = oracle.attention(np_of(q), np_of(keys), np_of(values), scale=D**-0.5, mask=np.array(mask))
    assert_close(np_of(out), expected, OUTPUT_TOLERANCE[mx.float32])


def test_unpatched_mask_stays_a_mask(backend, monkeypatch):
    """Without the patch no mask is noted: the function alone passes BatchKVCache's mask on."""
    seen = passed_on(monkeypatch)
    _, batch = requests_and_batch((6, 2), mx.float32, seed=5)
    attend(batch, *step_inputs(2, 1, mx.float32, seed=5), backend)
    assert seen[0][1] is None and isinstance(seen[0][0], mx.array)


def test_batch_generator(backend, monkeypatch):
    """mlx_lm's BatchGenerator (continuous batching: prompts of three lengths, one request
    joining later) patched, each generated token's log-probabilities against the float64-attention
    model's; its decode steps pass key ranges."""
    from mlx_lm.generate import BatchGenerator

    model = small_llama(mx.float32, seed=6)
    prompts = [mx.random.randint(0, VOCAB, (n,), key=mx.random.key(60 + n)).tolist() for n in (3, 13, 6, 9)]

    def generate():
        gen = BatchGenerator(model, max_tokens=6)
        uids = gen.insert(prompts[:3])
        out = {}
        for step in range(40):
            if step == 2:
                uids += gen.insert(prompts[3:])
            for r in gen.next_generated():
                out.setdefault(r.uid, []).append((r.token, np.array(r.logprobs)))
            if all(len(out.get(u, ())) == 6 for u in uids):
                break
        gen.close()
        return [out[u] for u in uids]

    with monkeypatch.context() as m:
        m.setattr(llama, "scaled_dot_product_attention", oracle_attention)
        expected = generate()
    seen = passed_on(monkeypatch)
    restore = fusedattend.patch_mlx_lm(backend=backend)
    try:
        got = generate()
    finally:
        restore()
    assert any(ranges is not None for _, ranges in seen)
    for request, (ours, theirs) in enumerate(zip(got, expected)):
        assert [t for t, _ in ours] == [t for t, _ in theirs], f"request {request}: other tokens"
        assert_close(np.stack([lp for _, lp in ours]), np.stack([lp for _, lp in theirs]), PROMPT_TOLERANCE[mx.float32])
