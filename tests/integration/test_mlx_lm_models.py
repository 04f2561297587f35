"""fusedattend inside an mlx_lm model (`fusedattend.patch_mlx_lm`), against the same model with
float64 attention (fusedattend.conformance.oracle) in its place.

A small Llama of random weights decodes a fixed token sequence over mlx_lm's own caches, filled
with the same random keys and values for both runs (KVCache: slices of a buffer that grows by 256
keys; QuantizedKVCache: triples of such slices), and each step's logits are compared. mlx_lm's
own quantized attention is no oracle here: it rounds scores and weights to bfloat16, and on MLX
0.32.4's CUDA backend it raises past 2048 keys, the case the long test crosses.
"""

import mlx.core as mx
import numpy as np
import pytest

pytest.importorskip("mlx_lm")
import mlx_lm.models.base as base  # noqa: E402
import mlx_lm.models.llama as llama  # noqa: E402
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache  # noqa: E402

import fusedattend  # noqa: E402
from fusedattend import mlx_lm_attention  # noqa: E402
from fusedattend.conformance import oracle  # noqa: E402
from fusedattend.conformance.grids import np_of  # noqa: E402

VOCAB = 512
BITS, GROUP_SIZE = 4, 64


def small_llama(dtype, seed=0):
    """2 layers, 8 query heads over 2 kv heads of D = 64."""
    mx.random.seed(seed)
    args = llama.ModelArgs(model_type="llama", hidden_size=512, num_hidden_layers=2, intermediate_size=1024,
                           num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=VOCAB)
    model = llama.Model(args)
    model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


def filled_caches(model, quantized, S0, seed):
    """Each layer's mlx_lm cache holding S0 random keys and values (the same for the same seed)."""
    out = []
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        shape, dtype = (1, attn.n_kv_heads, S0, attn.head_dim), attn.o_proj.weight.dtype
        k, v = (mx.random.normal(shape, key=mx.random.key(seed * 100 + 2 * i + j)).astype(dtype) for j in (0, 1))
        cache = QuantizedKVCache(group_size=GROUP_SIZE, bits=BITS) if quantized else KVCache()
        cache.update_and_fetch(k, v)
        out.append(cache)
    return out


def oracle_attention(queries, keys, values, cache, scale, mask, sinks=None):
    """float64 attention (fusedattend.conformance.oracle, no code shared with fusedattend), in the queries' dtype;
    mask: None, "causal" or a boolean array (a BatchKVCache's)."""
    assert sinks is None
    if isinstance(mask, mx.array):
        mask = np.array(mask)
    if hasattr(cache, "bits"):
        keys, values = (oracle.dequantize(np.array(codes), np_of(scales), np_of(biases), bits=cache.bits,
                                          group_size=cache.group_size) for codes, scales, biases in (keys, values))
    else:
        keys, values = np_of(keys), np_of(values)
    out = oracle.attention(np_of(queries), keys, values, scale=scale, mask=mask)
    return mx.array(out.astype(np.float32)).astype(queries.dtype)


def decode(model, cache, tokens, prompt):
    """Logits (float32 numpy) after the first `prompt` tokens (one call: prefill), then after
    each further token, fed one a step."""
    steps = [model(tokens[None, :prompt], cache=cache)]
    steps += [model(tokens[None, t:t + 1], cache=cache) for t in range(prompt, tokens.size)]
    return np.stack([np.array(logits[0, -1].astype(mx.float32)) for logits in steps])


def patched_against_oracle(model, quantized, S0, steps, backend, monkeypatch, seed=1, prompt=1):
    """Logits of the patched model and of the float64-attention one, over caches of S0 keys."""
    tokens = mx.random.randint(0, VOCAB, (prompt + steps - 1,), key=mx.random.key(seed))
    with monkeypatch.context() as m:
        m.setattr(llama, "scaled_dot_product_attention", oracle_attention)
        expected = decode(model, filled_caches(model, quantized, S0, seed), tokens, prompt)
    restore = fusedattend.patch_mlx_lm(backend=backend)
    try:
        got = decode(model, filled_caches(model, quantized, S0, seed), tokens, prompt)
    finally:
        restore()
    return got, expected


def assert_close(got, expected, rtol):
    scale = np.abs(expected).max()
    err = np.abs(got - expected).max()
    assert np.isfinite(got).all()
    assert err <= rtol * scale, f"logits differ by {err:.3g} of max {scale:.3g}"


# Of the logits' largest, measured (2026-12-02; commit d205b41: docs/h200/mlx-lm/logit_margins.py) on the CPU
# backends and on the H200: float32 under 1.1e-6; bfloat16 up to 4.0e-3 (an attention output
# rounded to the other side of a bfloat16 step). Dropping the newest key moves them 1.2-1.5e-2
# at 250 keys (2.8e-3 in float32 at 2046 keys, which the bfloat16 bound cannot see), a wrong GQA
# head map 0.27-0.47. A prompt adds MLX's SDPA: in bfloat16 6.4-8.2e-3 on both; in float32 under
# 1.1e-6 on the CPU, 2.2e-4 (KVCache) and 6.5e-4 (QuantizedKVCache) on the H200's CUDA backend.
# A dropped key moves prompted runs 0.07.
TOLERANCE = {mx.float32: 1e-5, mx.bfloat16: 8e-3}
PROMPT_TOLERANCE = {mx.float32: 2e-3, mx.bfloat16: 2e-2}


@pytest.mark.parametrize("quantized", [False, True], ids=["KVCache", "QuantizedKVCache"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_decode_across_cache_growth(dtype, quantized, backend, monkeypatch):
    """250 keys cached, 12 steps: the buffer grows at 256, and S = 256 is the whole buffer."""
    got, expected = patched_against_oracle(small_llama(dtype), quantized, 250, 12, backend, monkeypatch)
    assert_close(got, expected, TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_quantized_decode_past_2048_keys(dtype, backend, monkeypatch):
    """Where mlx_lm's own quantized attention raises on MLX 0.32.4's CUDA backend (2049 keys)."""
    got, expected = patched_against_oracle(small_llama(dtype), True, 2046, 5, backend, monkeypatch, seed=2)
    assert_close(got, expected, TOLERANCE[dtype])


@pytest.mark.parametrize("quantized", [False, True], ids=["KVCache", "QuantizedKVCache"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["float32", "bfloat16"])
def test_prefill_then_decode(dtype, quantized, backend, monkeypatch):
    """A 12-token prompt (MLX's fused SDPA, a quantized cache dequantized for it), then decode."""
    got, expected = patched_against_oracle(small_llama(dtype), quantized, 30, 4, backend, monkeypatch,
                                           seed=4, prompt=12)
    assert_close(got, expected, PROMPT_TOLERANCE[dtype])


@pytest.mark.parametrize("kv_bits", [None, BITS], ids=["KVCache", "kv_bits=4"])
def test_generate_step(kv_bits, backend, monkeypatch):
    """mlx_lm's own generation loop (README's example): a prompt, then a cache quantized from
    the start (`kv_bits`, `quantized_kv_start=0`), each step's log-probabilities against the
    float64-attention model's."""
    from mlx_lm.generate import generate_step

    model = small_llama(mx.float32)
    prompt = mx.random.randint(0, VOCAB, (20,), key=mx.random.key(5))

    def logprobs():
        steps = generate_step(prompt, model, max_tokens=6, kv_bits=kv_bits, kv_group_size=GROUP_SIZE,
                              quantized_kv_start=0, sampler=lambda x: mx.zeros(x.shape[:-1], mx.uint32))
        return np.stack([np.array(lp) for _, lp in steps])

    with monkeypatch.context() as m:
        m.setattr(llama, "scaled_dot_product_attention", oracle_attention)
        expected = logprobs()
    restore = fusedattend.patch_mlx_lm(backend=backend)
    try:
        got = logprobs()
    finally:
        restore()
    assert_close(got, expected, PROMPT_TOLERANCE[mx.float32])


def test_decode_steps_take_fusedattend(monkeypatch):
    """Each layer's decode step calls ours; prefill (L > 8) does not."""
    calls = []

    def counted(name):
        real = getattr(mlx_lm_attention, name)

        def call(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for name in ("decode_attention", "quantized_decode_attention"):
        monkeypatch.setattr(mlx_lm_attention, name, counted(name))
    original = base.scaled_dot_product_attention
    model = small_llama(mx.float32)
    tokens = mx.random.randint(0, VOCAB, (1, 12), key=mx.random.key(3))
    restore = fusedattend.patch_mlx_lm()
    try:
        for quantized, name in ((False, "decode_attention"), (True, "quantized_decode_attention")):
            cache = filled_caches(model, quantized, 40, seed=3)
            mx.eval(model(tokens[:, :9], cache=cache))  # prefill: MLX's SDPA
            assert calls == []
            mx.eval(model(tokens[:, 9:10], cache=cache), model(tokens[:, 10:12], cache=cache))
            assert calls == [name] * 2 * 2  # two steps, two layers
            calls.clear()
    finally:
        restore()
    assert llama.scaled_dot_product_attention is original


def test_patch_restores_and_refuses_twice():
    original, make_mask = base.scaled_dot_product_attention, BatchKVCache.make_mask
    restore = fusedattend.patch_mlx_lm()
    try:
        assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention is not original
        assert BatchKVCache.make_mask is not make_mask
        with pytest.raises(RuntimeError, match="patched already"):
            fusedattend.patch_mlx_lm()
    finally:
        restore()
    assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention is original
    assert BatchKVCache.make_mask is make_mask


@pytest.mark.parametrize("name, error", [("tpu", ValueError), (3, TypeError)])
def test_patch_names_a_bad_backend(name, error):
    original = base.scaled_dot_product_attention
    with pytest.raises(error, match="backend"):
        fusedattend.patch_mlx_lm(backend=name)
    assert base.scaled_dot_product_attention is original


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "quantized"])
def test_sinks_go_to_mlx_sdpa(quantized):
    """Attention sinks (gpt-oss) have no fused form here: MLX's SDPA takes them, over K/V
    dequantized where the cache is quantized (mlx_lm's own function raises there)."""
    q, k, v = (mx.random.normal(shape, key=mx.random.key(4 + i))
               for i, shape in enumerate([(1, 4, 1, 64), (1, 2, 40, 64), (1, 2, 40, 64)]))
    sinks = mx.random.normal((4,), key=mx.random.key(7))
    cache = QuantizedKVCache(group_size=GROUP_SIZE, bits=BITS) if quantized else KVCache()
    keys, values = cache.update_and_fetch(k, v)
    out = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, cache, 0.125, None, sinks)
    if quantized:
        k, v = (fusedattend.dequantize_kv(*x, bits=BITS, group_size=GROUP_SIZE) for x in (keys, values))
    assert mx.array_equal(out, mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, sinks=sinks))
    without = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, cache, 0.125, None)
    assert not mx.allclose(without, out)


def test_bad_queries_and_caches_named():
    q, k = mx.zeros((1, 4, 1, 64)), mx.zeros((1, 2, 8, 64))
    with pytest.raises(TypeError, match="queries"):
        mlx_lm_attention.scaled_dot_product_attention(q.tolist(), k, k, KVCache(), 0.125, None)

    class BitsOnly:
        bits = 4

    with pytest.raises(TypeError, match="group_size"):
        mlx_lm_attention.scaled_dot_product_attention(q, k, k, BitsOnly(), 0.125, None)
