"""QuantizedWindowCache on its own: the flush rule, batches (merge, extend, filter, extract,
right-padded prompts), state round trips through mlx_lm's save/load, trim, and bad arguments.

The oracle of the cache's contents is the rule itself applied to all the tokens fed so far:
mx.quantize of the first window * max(0, T // window - 1) tokens, the rest as fed (quantization is
per token, so quantizing them in pieces must give the same bits)."""

import copy

import mlx.core as mx
import numpy as np
import pytest

pytest.importorskip("mlx_lm")
from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache, trim_prompt_cache  # noqa: E402

import fusedattend as fa  # noqa: E402
from fusedattend import mlx_lm_cache, window_attention, window_cache  # noqa: E402

H, D, BITS, GS = 2, 64, 4, 64


def tokens(n, seed, B=1, dtype=mx.float32):
    return tuple(mx.random.normal((B, H, n, D), key=mx.random.key(seed * 7 + j)).astype(dtype) for j in (0, 1))


def expected_contents(k, window):
    """What the rule says a request holding keys k (1, H, T, D) has: dequantized keys, Q, W."""
    T = k.shape[2]
    Q = window * max(0, T // window - 1)
    parts = [k[:, :, Q:]]
    if Q:
        parts.insert(0, mx.dequantize(*mx.quantize(k[:, :, :Q], group_size=GS, bits=BITS), group_size=GS, bits=BITS))
    return mx.concatenate(parts, axis=2), Q, T - Q


def feed(cache, chunks, seed):
    """Update with chunks of the given lengths; returns all keys and values fed."""
    ks, vs = [], []
    for i, n in enumerate(chunks):
        k, v = tokens(n, seed * 100 + i)
        cache.update_and_fetch(k, v)
        ks.append(k)
        vs.append(v)
    return mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)


def prompts_for(window):
    """Prompt lengths about the window's edges: 1, window - 1 .. window + 1, 2 window - 1 .. 2 window + 1."""
    return sorted({n for n in (1, window - 1, window, window + 1, 2 * window - 1, 2 * window, 2 * window + 1,
                               5 * window + 3) if n >= 1})


@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 8, 9])
def test_flush_rule(window):
    """After every update the cache holds what the rule says, bit for bit, for prompts at the
    window's edges followed by decode steps across two flushes."""
    for prompt in prompts_for(window):
        cache = fa.QuantizedWindowCache(BITS, GS, window)
        k_all, v_all = [], []
        for step, n in enumerate([prompt] + [1] * (2 * window + 1)):
            k, v = tokens(n, prompt * 1000 + step)
            got_k, got_v = cache.update_and_fetch(k, v)
            k_all.append(k)
            v_all.append(v)
            want_k, Q, W = expected_contents(mx.concatenate(k_all, axis=2), window)
            want_v, _, _ = expected_contents(mx.concatenate(v_all, axis=2), window)
            assert cache.quantized_lengths == [Q] and cache.window_lengths == [W], (prompt, step)
            assert cache.offset == Q + W and cache.size() == Q + W
            assert all(mx.array_equal(a, b) for a, b in zip(cache.dequantized(), (want_k, want_v))), (prompt, step)
            # What attention gets: a first update's own keys, as they came; later, the cache.
            assert all(mx.array_equal(a, b) for a, b in zip((got_k, got_v), (k, v) if step == 0 else (want_k, want_v)))


def test_prompts_longer_than_a_block_keep_their_bits(monkeypatch):
    """A prompt's tokens are quantized, and dequantized for its attention, DEQUANTIZE_BLOCK at a
    time (for peak memory); the contents are the rule's bit for bit, and the blocks' dequantized
    keys the one-piece ones."""
    block = window_attention.DEQUANTIZE_BLOCK
    window = 128
    sizes = []
    real = mx.quantize
    monkeypatch.setattr(window_cache.mx, "quantize", lambda x, **kw: sizes.append(x.shape[2]) or real(x, **kw))
    cache = fa.QuantizedWindowCache(BITS, GS, window)
    k_all, v_all = feed(cache, [2 * block + 300, block + 1], seed=3)
    assert sizes and max(sizes) == block and len(sizes) > 2
    want = [expected_contents(x, window)[0] for x in (k_all, v_all)]
    for in_blocks in (False, True):
        assert all(mx.array_equal(a, b) for a, b in zip(cache.dequantized(in_blocks=in_blocks), want)), in_blocks


def test_history_is_never_quantized_again(monkeypatch):
    """Decode steps between flushes quantize nothing; a flush quantizes exactly `window` tokens
    of keys and of values, and leaves the codes already written as they were."""
    window = 8
    cache = fa.QuantizedWindowCache(BITS, GS, window)
    feed(cache, [21], seed=1)  # 8 quantized, 13 in the window
    quantized = [mx.array(x) for x in cache._kq]
    sizes = []
    real = mx.quantize
    monkeypatch.setattr(window_cache.mx, "quantize", lambda x, **kw: sizes.append(x.shape[2]) or real(x, **kw))
    for step in range(window + 3):
        cache.update_and_fetch(*tokens(1, 50 + step))
        flushes = (step >= 2) + (step >= 10)  # the window reaches 16 at T = 24 and 32
        assert sizes == [window] * 2 * flushes, step
    assert cache.quantized_lengths == [24]
    assert all(mx.array_equal(a[:, :, :8], b[:, :, :8]) for a, b in zip(quantized, cache._kq))


def test_empty_cache():
    cache = fa.QuantizedWindowCache()
    assert cache.empty() and cache.size() == 0 and cache.offset == 0 and cache.nbytes == 0
    assert cache.is_trimmable() and cache.trim(3) == 0
    assert cache.make_mask(1) is None and cache.make_mask(5) == "causal"
    cache.update_and_fetch(*tokens(3, 1))
    assert not cache.empty() and cache.offset == 3 and cache.nbytes > 0


def test_trim_within_the_window():
    cache = fa.QuantizedWindowCache(BITS, GS, 4)
    k, _ = feed(cache, [10], seed=2)  # 4 quantized, 6 in the window
    assert trim_prompt_cache([cache], 2) == 2
    assert cache.offset == 8 and cache.window_lengths == [4]
    assert cache.trim(10) == 4  # the window's tokens, no more: quantized tokens stay
    assert cache.offset == 4 and cache.window_lengths == [0]
    k2, _ = tokens(1, 3)
    got, _ = cache.update_and_fetch(k2, k2)
    kept = mx.dequantize(*mx.quantize(k[:, :, :4], group_size=GS, bits=BITS), group_size=GS, bits=BITS)
    assert mx.array_equal(got, mx.concatenate([kept, k2], axis=2))


@pytest.mark.parametrize("chunks", [[3], [9], [9, 1, 1], [30, 2]], ids=["window-only", "flushed", "steps", "long"])
def test_state_round_trip(chunks, tmp_path):
    """mlx_lm's save_prompt_cache / load_prompt_cache give back the same cache: same keys, and
    the same keys again after further updates."""
    caches = [fa.QuantizedWindowCache(BITS, GS, 4) for _ in range(2)]
    for i, c in enumerate(caches):
        feed(c, chunks, seed=10 + i)
    mlx_lm_cache.register_with_mlx_lm()
    path = str(tmp_path / "cache.safetensors")
    save_prompt_cache(path, caches)
    loaded = load_prompt_cache(path)
    for c, back in zip(caches, loaded):
        assert type(back) is fa.QuantizedWindowCache
        assert back.offset == c.offset and back.quantized_lengths == c.quantized_lengths
        assert back.window_lengths == c.window_lengths and back.window == c.window
        for step in range(6):
            new = tokens(1, 90 + step)
            assert all(mx.array_equal(a, b) for a, b in zip(c.update_and_fetch(*new), back.update_and_fetch(*new)))


def test_batched_state_round_trip(tmp_path):
    """A batch (requests of other lengths, one of them empty) saved and loaded: the same requests."""
    alone, batch = batch_of([3, 9, 0, 14])
    mlx_lm_cache.register_with_mlx_lm()
    path = str(tmp_path / "batch.safetensors")
    save_prompt_cache(path, [batch])
    (back,) = load_prompt_cache(path)
    assert back.offset.tolist() == batch.offset.tolist() == [3, 9, 0, 14]
    assert_same_requests(back, alone)


def batch_of(lengths, window=4, seed=20):
    alone = [fa.QuantizedWindowCache(BITS, GS, window) for _ in lengths]
    for i, (c, n) in enumerate(zip(alone, lengths)):
        if n:
            feed(c, [n], seed=seed + i)
    return alone, fa.QuantizedWindowCache.merge(copy.deepcopy(alone))


def assert_same_requests(batch, alone):
    for b, c in enumerate(alone):
        one = batch.extract(b)
        assert one.quantized_lengths == c.quantized_lengths and one.window_lengths == c.window_lengths
        assert one.offset == c.offset
        if c.empty():
            continue
        for x, y in zip(one.dequantized(), c.dequantized()):
            assert mx.array_equal(x, y), f"request {b}"


def test_batched_updates_are_each_request_alone(backend):
    """Requests of 1, 7, 8 and 13 tokens (4-token window: each flushes at its own step) in one
    batch: a right-padded prompt chunk, then decode steps. Each request's cache, and its
    attention output, bit for bit as alone."""
    lengths = [1, 7, 8, 13]
    alone, batch = batch_of(lengths)
    assert batch.offset.tolist() == lengths
    chunk = [2, 5, 1, 3]
    k, v = tokens(max(chunk), 30, B=len(lengths))
    batch.prepare(lengths=chunk, right_padding=[max(chunk) - n for n in chunk])
    assert mx.array_equal(batch.make_mask(max(chunk)), batch.make_mask(max(chunk), return_array=True))
    batch.update_and_fetch(k, v)
    batch.finalize()
    for b, c in enumerate(alone):
        c.update_and_fetch(k[b:b + 1, :, :chunk[b]], v[b:b + 1, :, :chunk[b]])
    assert_same_requests(batch, alone)
    for step in range(6):
        k, v = tokens(1, 40 + step, B=len(lengths))
        q = mx.random.normal((len(lengths), 8, 1, D), key=mx.random.key(step))
        batch.update_and_fetch(k, v)
        out = batch.attend(q, D**-0.5, backend=backend)
        for b, c in enumerate(alone):
            c.update_and_fetch(k[b:b + 1], v[b:b + 1])
            assert mx.array_equal(out[b:b + 1], c.attend(q[b:b + 1], D**-0.5, backend=backend)), (step, b)
    assert_same_requests(batch, alone)


def test_a_batch_in_step_is_each_request_alone(backend):
    """Three requests of one length, from one batched prompt through decode steps across two
    flushes (flushed in one go): each request's codes, scales, biases and window, and its
    attention output, bit for bit as alone."""
    B, window = 3, 4
    batch = fa.QuantizedWindowCache(BITS, GS, window)
    alone = [fa.QuantizedWindowCache(BITS, GS, window) for _ in range(B)]
    for step, n in enumerate([13] + [1] * (2 * window + 1)):
        k, v = tokens(n, 70 + step, B=B)
        batch.update_and_fetch(k, v)
        for b, c in enumerate(alone):
            c.update_and_fetch(k[b:b + 1], v[b:b + 1])
        q = mx.random.normal((B, 8, 1, D), key=mx.random.key(step))
        out = batch.attend(q, D**-0.5, backend=backend)
        for b, c in enumerate(alone):
            one = batch.extract(b)
            Q, W = c.quantized_lengths[0], c.window_lengths[0]
            assert one.quantized_lengths == [Q] and one.window_lengths == [W], (step, b)
            for mine, its in zip([*one._kq, *one._vq], [*c._kq, *c._vq]):
                assert mx.array_equal(mine[:, :, :Q], its[:, :, :Q]), (step, b)
            for mine, its in ((one._wk, c._wk), (one._wv, c._wv)):
                assert mx.array_equal(mine[:, :, :W], its[:, :, :W]), (step, b)
            assert mx.array_equal(out[b:b + 1], c.attend(q[b:b + 1], D**-0.5, backend=backend)), (step, b)


def test_filter_extend_extract():
    """Requests leaving (filter) and joining (extend, merge of an empty cache) keep every other
    request as it was."""
    alone, batch = batch_of([3, 9, 14])
    batch.filter([2, 0])
    assert_same_requests(batch, [alone[2], alone[0]])
    more, other = batch_of([30], seed=60)
    empty = fa.QuantizedWindowCache(BITS, GS, 4)
    batch.extend(other)
    batch.extend(fa.QuantizedWindowCache.merge([empty]))
    assert batch.batch_size == 4 and batch.offset.tolist() == [14, 3, 30, 0]
    assert_same_requests(batch, [alone[2], alone[0], more[0], empty])
    k, v = tokens(1, 70, B=4)
    batch.update_and_fetch(k, v)
    for b, c in enumerate([alone[2], alone[0], more[0], empty]):
        c.update_and_fetch(k[b:b + 1], v[b:b + 1])
    assert_same_requests(batch, [alone[2], alone[0], more[0], empty])


def test_batched_mask_hides_each_requests_padding():
    """Unpatched, mlx_lm's attention gets the left-aligned keys and this mask: request b's row i
    sees its own keys up to its own position."""
    _, batch = batch_of([2, 6])
    mask = np.array(batch.make_mask(1))
    assert mask.shape == (2, 1, 1, 7)
    assert mask[0, 0, 0].tolist() == [True] * 3 + [False] * 4 and mask[1, 0, 0].all()


@pytest.mark.parametrize("make, error, name", [
    (lambda: fa.QuantizedWindowCache(window=0), ValueError, "window"),
    (lambda: fa.QuantizedWindowCache(window=2.0), TypeError, "window"),
    (lambda: fa.QuantizedWindowCache(window=True), TypeError, "window"),
    (lambda: fa.QuantizedWindowCache(bits=3), ValueError, "bits"),
    (lambda: fa.QuantizedWindowCache(bits=16), ValueError, "bits"),
    (lambda: fa.QuantizedWindowCache(group_size=48), ValueError, "group_size"),
    (lambda: fa.QuantizedWindowCache(group_size=128).update_and_fetch(*tokens(2, 1)), ValueError, "group_size"),
    (lambda: fa.QuantizedWindowCache().update_and_fetch(tokens(2, 1)[0], tokens(2, 1)[0][..., :32]), ValueError,
     "values"),
    (lambda: fa.QuantizedWindowCache().update_and_fetch(np.zeros((1, 2, 2, 64)), tokens(2, 1)[0]), TypeError, "keys"),
    (lambda: fa.QuantizedWindowCache().make_mask(4, window_size=2), ValueError, "window_size"),
    (lambda: fa.QuantizedWindowCache().prepare(left_padding=[2]), ValueError, "left_padding"),
    (lambda: fa.QuantizedWindowCache().prepare(right_padding=[2]), ValueError, "lengths"),
    (lambda: fa.QuantizedWindowCache.merge([fa.QuantizedWindowCache(window=4), fa.QuantizedWindowCache(window=8)]),
     ValueError, "window"),
])
def test_bad_arguments_named(make, error, name):
    with pytest.raises(error, match=name):
        make()


def test_wrong_batch_size_refused():
    cache = fa.QuantizedWindowCache()
    cache.update_and_fetch(*tokens(2, 1))
    with pytest.raises(ValueError, match="requests"):
        cache.update_and_fetch(*tokens(1, 2, B=2))


def graph_ops(cache):
    """The operations (by name) between the cache's arrays and the arrays they were made from."""
    import io
    import re

    dot = io.StringIO()
    mx.export_to_dot(dot, *[x for x in (*(cache._kq or ()), *(cache._vq or ()), cache._wk, cache._wv)])
    return sorted(re.findall(r'label ="(\w+)", shape=rectangle', dot.getvalue()))


@pytest.mark.parametrize("lengths", [[21], [21, 17, 25], [21, 21, 21]], ids=["alone", "batch", "batch in step"])
def test_operations_a_decode_step(lengths):
    """A decode step that does not flush adds two operations a layer (the window writes: slice
    updates; where a batch's windows differ, scatters and their index's broadcast); a flush adds two quantizations, two
    concatenations and eight writes for each request that flushes (once for a batch in step), the
    rest being slices (views)."""
    window = 8
    _, cache = batch_of(lengths, window=window)  # quantized buffers made: windows of 13, 9 and 9
    mx.eval([x for x in cache.state if isinstance(x, mx.array)])
    for step in range(2 * window):
        k, v = tokens(1, 90 + step, B=len(lengths))
        mx.eval(k, v)
        before = cache.window_lengths
        cache.update_and_fetch(k, v)
        flushing = sum(w + 1 == 2 * window for w in before)
        flushes = min(flushing, 1) if len(set(before)) == 1 else flushing  # a batch in step: in one go
        ops = graph_ops(cache)
        if not flushing:
            if len(set(before)) == 1:
                assert ops == ["SliceUpdate"] * 2, step
            else:  # and one broadcast of the scatters' index
                assert ops == ["Broadcast", "ScatterAxis", "ScatterAxis"], step
        else:
            counts = {name: ops.count(name) for name in set(ops)}
            assert counts.pop("Quantize") == 2 * flushes and counts.pop("Concatenate") == 2 * flushes
            assert counts.pop("SliceUpdate") == 8 * flushes + 2 * (len(lengths) - flushing), step
            assert set(counts) == {"Slice"}, step
        mx.eval([x for x in cache.state if isinstance(x, mx.array)])
