"""fusedattend inside an mlx_lm model (`fusedattend.patch_mlx_lm`), against the same model with
float64 attention (tests.oracle) in its place.

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
from mlx_lm.models.cache import KVCache, QuantizedKVCache  # noqa: E402

import fusedattend  # noqa: E402
from fusedattend import mlx_lm_attention  # noqa: E402
from tests import oracle  # noqa: E402
from tests.parity.grids import np_of  # noqa: E402

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
    """Each layer's mlx_lm cache holding S0 random keys and values (the same for every seed)."""
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
    """float64 attention (tests.oracle, no code shared with fusedattend), in the queries' dtype."""
    assert sinks is None and mask is None and queries.shape[-2] == 1
    if hasattr(cache, "bits"):
        keys, values = (oracle.dequantize(np.array(codes), np_of(scales), np_of(biases), bits=cache.bits,
                                          group_size=cache.group_size) for codes, scales, biases in (keys, values))
    else:
        keys, values = np_of(keys), np_of(values)
    out = oracle.attention(np_of(queries), keys, values, scale=scale)
    return mx.array(out.astype(np.float32)).astype(queries.dtype)


def decode(model, cache, tokens):
    """Logits (float32 numpy) after each token, fed one a step."""
    steps = []
    for t in range(tokens.size):
        logits = model(tokens[None, t:t + 1], cache=cache)
        steps.append(np.array(logits[0, -1].astype(mx.float32)))
    return np.stack(steps)


def patched_against_oracle(model, quantized, S0, steps, backend, monkeypatch, seed=1):
    tokens = mx.random.randint(0, VOCAB, (steps,), key=mx.random.key(seed))
    with monkeypatch.context() as m:
        m.setattr(llama, "scaled_dot_product_attention", oracle_attention)
        expected = decode(model, filled_caches(model, quantized, S0, seed), tokens)
    restore = fusedattend.patch_mlx_lm(backend=backend)
    try:
        got = decode(model, filled_caches(model, quantized, S0, seed), tokens)
    finally:
        restore()
    return got, expected


def assert_close(got, expected, rtol):
    scale = np.abs(expected).max()
    err = np.abs(got - expected).max()
    assert np.isfinite(got).all()
    assert err <= rtol * scale, f"logits differ by {err:.3g} of max {scale:.3g}"


# Of the logits' largest, measured on the CPU backends (2026-12-02): float32 under 1e-6, bfloat16
# 0 to 2.8e-3 (an attention output rounded to the other side of a bfloat16 step). Dropping the
# newest key moves them 1.2-1.5e-2, a wrong GQA head map 0.45.
TOLERANCE = {mx.float32: 1e-5, mx.bfloat16: 5e-3}


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


def test_decode_steps_take_fusedattend(monkeypatch):
    """Each layer's decode step calls ours; prefill (L > 8) and sinks call mlx_lm's."""
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
            mx.eval(model(tokens[:, :9], cache=cache))  # prefill: mlx_lm's
            assert calls == []
            mx.eval(model(tokens[:, 9:10], cache=cache), model(tokens[:, 10:12], cache=cache))
            assert calls == [name] * 2 * 2  # two steps, two layers
            calls.clear()
    finally:
        restore()
    assert llama.scaled_dot_product_attention is original


def test_patch_restores_and_refuses_twice():
    original = base.scaled_dot_product_attention
    restore = fusedattend.patch_mlx_lm()
    try:
        assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention is not original
        with pytest.raises(RuntimeError, match="patched already"):
            fusedattend.patch_mlx_lm()
    finally:
        restore()
    assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention is original


@pytest.mark.parametrize("name, error", [("tpu", ValueError), (3, TypeError)])
def test_patch_names_a_bad_backend(name, error):
    original = base.scaled_dot_product_attention
    with pytest.raises(error, match="backend"):
        fusedattend.patch_mlx_lm(backend=name)
    assert base.scaled_dot_product_attention is original


def test_sinks_go_to_mlx_lm():
    """mlx_lm's sinks (gpt-oss) have no fused form here: the call is mlx_lm's, unchanged."""
    q = mx.random.normal((1, 4, 1, 64), key=mx.random.key(4))
    k = mx.random.normal((1, 2, 40, 64), key=mx.random.key(5))
    v = mx.random.normal((1, 2, 40, 64), key=mx.random.key(6))
    sinks = mx.random.normal((4,), key=mx.random.key(7))
    seen = []

    def mlx_lm_like(*args, **kwargs):
        seen.append(kwargs["sinks"])
        return "mlx_lm's"

    out = mlx_lm_attention.scaled_dot_product_attention(q, k, v, None, 0.125, None, sinks,
                                                         mlx_lm_attention=mlx_lm_like)
    assert out == "mlx_lm's" and seen == [sinks]
    plain = mlx_lm_attention.scaled_dot_product_attention(q, k, v, None, 0.125, None)
    assert mx.array_equal(plain, fusedattend.decode_attention(q, k, v, scale=0.125))
