"""QuantizedWindowCache in mlx_lm's generation, patched (`fusedattend.patch_mlx_lm`).

A small Llama of random weights (untied embeddings, so that greedy tokens vary) generates over
`fusedattend.make_prompt_cache` with a 4-token window, so that prompts and decode steps flush.
The oracle is the same model and cache unpatched with float64 attention in mlx_lm's place: the
cache then hands it each request's keys dequantized, and the mask over them."""

import mlx.core as mx
import numpy as np
import pytest

pytest.importorskip("mlx_lm")
import mlx_lm.models.llama as llama  # noqa: E402
from mlx_lm.generate import BatchGenerator, generate_step  # noqa: E402
from mlx_lm.models.cache import RotatingKVCache  # noqa: E402

import fusedattend as fa  # noqa: E402
from fusedattend import mlx_lm_attention, window_attention  # noqa: E402
from tests.integration.test_mlx_lm_models import PROMPT_TOLERANCE, VOCAB, assert_close, oracle_attention  # noqa: E402

WINDOW = 4
TOKENS = 10


@pytest.fixture(scope="module")
def model():
    """2 layers, 8 query heads over 2 kv heads of D = 64, untied embeddings."""
    mx.random.seed(0)
    args = llama.ModelArgs(model_type="llama", hidden_size=512, num_hidden_layers=2, intermediate_size=1024,
                           num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=VOCAB,
                           tie_word_embeddings=False)
    model = llama.Model(args)
    mx.eval(model.parameters())
    return model


def greedy(x):
    return mx.argmax(x, axis=-1)


def alone(model, prompt, max_tokens=TOKENS, prefill_step_size=2048):
    """(tokens, log-probabilities) of generate_step over a fresh cache."""
    cache = fa.make_prompt_cache(model, window=WINDOW)
    steps = list(generate_step(mx.array(prompt), model, max_tokens=max_tokens, prompt_cache=cache, sampler=greedy,
                               prefill_step_size=prefill_step_size))
    return [int(t) for t, _ in steps], np.stack([np.array(lp) for _, lp in steps])


def check_against_float64_attention(model, module, prompt, backend, monkeypatch):
    """Patched generation over the window cache gives the tokens, and within the prompt
    tolerance the log-probabilities, of the same model unpatched with float64 attention in
    `module`'s (the model's mlx_lm module) place."""
    with monkeypatch.context() as m:
        m.setattr(module, "scaled_dot_product_attention", oracle_attention)
        want_tokens, want = alone(model, prompt)
    restore = fa.patch_mlx_lm(backend=backend)
    try:
        got_tokens, got = alone(model, prompt)
    finally:
        restore()
    assert got_tokens == want_tokens
    assert_close(got, want, PROMPT_TOLERANCE[mx.float32])


def test_generate_step_against_float64_attention(model, backend, monkeypatch):
    prompt = mx.random.randint(0, VOCAB, (37,), key=mx.random.key(5)).tolist()
    check_against_float64_attention(model, llama, prompt, backend, monkeypatch)


def test_decode_steps_take_the_windowed_call(model, monkeypatch, patched):
    """Each layer's decode step is one windowed_decode_attention call, or one launch of its plan
    (a GPU's L = 1 steps: windowed_decode_plan); the prompt is neither."""
    calls = []
    real, real_plan = window_attention.windowed_decode_attention, window_attention.windowed_decode_plan

    def counted(*args, **kwargs):
        calls.append(args[0].shape[-2])
        return real(*args, **kwargs)

    def counted_plan(*args, **kwargs):
        run = real_plan(*args, **kwargs)
        return run and (lambda q, *arrays: calls.append(q.shape[-2]) or run(q, *arrays))

    monkeypatch.setattr("fusedattend.window_cache.windowed_decode_attention", counted)
    monkeypatch.setattr("fusedattend.window_cache.windowed_decode_plan", counted_plan)
    monkeypatch.setattr("fusedattend.window_cache._PLANS", {})
    cache = fa.make_prompt_cache(model, window=WINDOW)
    tokens = mx.random.randint(0, VOCAB, (1, 16), key=mx.random.key(3))
    mx.eval(model(tokens[:, :12], cache=cache))
    assert calls == []
    mx.eval(model(tokens[:, 12:13], cache=cache), model(tokens[:, 13:16], cache=cache))
    assert calls == [1, 1, 3, 3]
    assert cache[0].quantized_lengths == [12] and cache[0].window_lengths == [4]  # 4 * (16 // 4 - 1)


def test_unpatched_is_the_dequantize_baseline(model, patched):
    """Unpatched, the cache hands mlx_lm's own attention its keys dequantized: same greedy tokens."""
    prompt = mx.random.randint(0, VOCAB, (21,), key=mx.random.key(8)).tolist()
    fused_tokens, fused = alone(model, prompt)
    restore = mlx_lm_attention.window_cache._PATCHES[0]
    mlx_lm_attention.window_cache._PATCHES[0] = 0
    try:
        dequantized_tokens, dequantized = alone(model, prompt)
    finally:
        mlx_lm_attention.window_cache._PATCHES[0] = restore
    assert fused_tokens == dequantized_tokens
    assert_close(fused, dequantized, PROMPT_TOLERANCE[mx.float32])


def test_qwen3_against_float64_attention(backend, monkeypatch):
    """Qwen3's attention (q/k norms, head_dim given apart from hidden size), as the benchmark's
    Qwen3-4B configuration has it, on 2 small layers."""
    import mlx_lm.models.qwen3 as qwen3

    mx.random.seed(1)
    model = qwen3.Model(qwen3.ModelArgs(
        model_type="qwen3", hidden_size=256, num_hidden_layers=2, intermediate_size=512, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6, vocab_size=VOCAB, max_position_embeddings=4096,
        rope_theta=1000000.0,
        tie_word_embeddings=False))
    mx.eval(model.parameters())
    prompt = mx.random.randint(0, VOCAB, (19,), key=mx.random.key(9)).tolist()
    check_against_float64_attention(model, qwen3, prompt, backend, monkeypatch)


@pytest.mark.parametrize("prefill_step_size", [2048, 5], ids=["one-chunk", "chunks-of-5"])
def test_batch_generator_tokens_are_each_request_alone(model, backend, prefill_step_size, patched):
    """Continuous batching over per-request caches (BatchGenerator.insert(..., caches=...)):
    prompts of four lengths, one request joining two steps later, one leaving early; prompts in
    one chunk, or in chunks of 5 (right-padded chunks over the tokens already cached). Each
    request's greedy tokens are those it generates alone with the same chunks."""
    # In chunks of 5, the second chunk holds 5 and 3 rows of the 13- and 9-token prompts.
    prompts = [mx.random.randint(0, VOCAB, (n,), key=mx.random.key(60 + n)).tolist() for n in (3, 13, 9, 6)]
    limits = [TOKENS, 4, TOKENS, TOKENS]
    want = [alone(model, p, n, prefill_step_size) for p, n in zip(prompts, limits)]
    gen = BatchGenerator(model, max_tokens=TOKENS, sampler=greedy, prefill_step_size=prefill_step_size)
    uids = gen.insert(prompts[:3], max_tokens=limits[:3],
                      caches=[fa.make_prompt_cache(model, window=WINDOW) for _ in range(3)])
    got = {}
    try:
        for step in range(60):
            if step == 2:
                uids += gen.insert(prompts[3:], max_tokens=limits[3:],
                                   caches=[fa.make_prompt_cache(model, window=WINDOW)])
            for r in gen.next_generated():
                got.setdefault(r.uid, []).append((r.token, np.array(r.logprobs)))
            if len(uids) == 4 and all(len(got.get(u, ())) == n for u, n in zip(uids, limits)):
                break
    finally:
        gen.close()
    for request, (uid, (tokens, logprobs)) in enumerate(zip(uids, want)):
        assert [t for t, _ in got[uid]] == tokens, f"request {request}: other tokens"
        assert_close(np.stack([lp for _, lp in got[uid]]), logprobs, PROMPT_TOLERANCE[mx.float32])


def test_a_short_padded_prompt_chunk_over_history(backend, patched):
    """A batched prompt's chunk of 3 rows, right-padded (requests of 1, 3 and 2 new tokens), over
    caches that hold tokens already: each request's real rows as that request alone."""
    from tests.integration.test_window_cache import batch_of, tokens

    alone, batch = batch_of([5, 12, 9], window=WINDOW)
    take = [1, 3, 2]
    k, v = tokens(3, 7, B=3)
    q = mx.random.normal((3, 8, 3, 64), key=mx.random.key(8))
    batch.prepare(lengths=take, right_padding=[3 - n for n in take])
    keys, values = batch.update_and_fetch(k, v)
    out = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, batch, 0.125, "causal", backend=backend)
    for b, (c, n) in enumerate(zip(alone, take)):
        keys, values = c.update_and_fetch(k[b:b + 1, :, :n], v[b:b + 1, :, :n])
        own = mlx_lm_attention.scaled_dot_product_attention(q[b:b + 1, :, :n], keys, values, c, 0.125,
                                                            "causal" if n > 1 else None, backend=backend)
        assert_close(np.array(out[b:b + 1, :, :n]), np.array(own), 1e-5)


def test_an_aligned_batched_prompt_takes_sdpa_causal(monkeypatch, patched):
    """Requests of equal lengths, a prompt chunk over history: MLX's SDPA gets the "causal" string
    (its fused form on the GPU), not a (B, 1, L, S) array; requests that differ get the array."""
    from tests.integration.test_window_cache import batch_of, tokens

    masks, sdpa = [], mx.fast.scaled_dot_product_attention

    def recording(*args, mask=None, **kwargs):
        masks.append(mask)
        return sdpa(*args, mask=mask, **kwargs)

    monkeypatch.setattr(mlx_lm_attention.mx.fast, "scaled_dot_product_attention", recording)
    q = mx.random.normal((2, 8, 12, 64), key=mx.random.key(8))
    k, v = tokens(12, 7, B=2)
    batched = []
    for held in ([9, 9], [9, 5]):
        alone, batch = batch_of(held, window=WINDOW)
        keys, values = batch.update_and_fetch(k, v)
        out = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, batch, 0.125, "causal")
        batched.append(masks[-1])
        for b, c in enumerate(alone):  # and each request's rows are its own
            keys, values = c.update_and_fetch(k[b:b + 1], v[b:b + 1])
            own = mlx_lm_attention.scaled_dot_product_attention(q[b:b + 1], keys, values, c, 0.125, "causal")
            assert_close(np.array(out[b:b + 1]), np.array(own), 1e-5)
    assert batched[0] == "causal" and isinstance(batched[1], mx.array) and batched[1].shape == (2, 1, 12, 21)


def test_sinks_take_mlx_sdpa_over_the_dequantized_keys(patched):
    """Attention sinks (gpt-oss) have no fused form: MLX's SDPA takes them over the cache's keys
    dequantized, and they change the result."""
    cache = fa.QuantizedWindowCache(window=WINDOW)
    k, v = (mx.random.normal((1, 2, 30, 64), key=mx.random.key(i)) for i in (1, 2))
    cache.update_and_fetch(k, v)
    q = mx.random.normal((1, 8, 1, 64), key=mx.random.key(3))
    keys, values = cache.update_and_fetch(k[:, :, :1], v[:, :, :1])
    sinks = mx.random.normal((8,), key=mx.random.key(4))
    out = mlx_lm_attention.scaled_dot_product_attention(q, keys, values, cache, 0.125, None, sinks)
    dk, dv = cache.dequantized()
    assert mx.array_equal(out, mx.fast.scaled_dot_product_attention(q, dk, dv, scale=0.125, sinks=sinks))
    assert not mx.allclose(out, mlx_lm_attention.scaled_dot_product_attention(q, keys, values, cache, 0.125, None))


def test_make_prompt_cache_refuses_what_it_cannot_serve(model):
    class Sliding:
        layers = model.layers

        def make_cache(self):
            return [RotatingKVCache(max_size=8) for _ in self.layers]

    with pytest.raises(ValueError, match="model: layer 0 takes mlx_lm's RotatingKVCache"):
        fa.make_prompt_cache(Sliding())
    with pytest.raises(ValueError, match="group_size=128"):
        fa.make_prompt_cache(model, group_size=128)
    with pytest.raises(ValueError, match="window"):
        fa.make_prompt_cache(model, window=0)
    with pytest.raises(ValueError, match="bits"):
        fa.make_prompt_cache(model, bits=5)
    with pytest.raises(TypeError, match="model"):
        fa.make_prompt_cache(object())
    caches = fa.make_prompt_cache(model, bits=2, group_size=32, window=16)
    assert len(caches) == 2 and all(c.quant_bits == 2 and c.window == 16 for c in caches)
