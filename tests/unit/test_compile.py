"""Calls inside mx.compile, as an MLX user's compiled step makes them.

The GPU and reference paths run there and give the bits they give outside it: bf16 and 4-bit K/V,
one block and split into blocks on the GPU (S = 300 and 1500), no mask, "causal", a boolean mask
and key ranges (an array, a KeyRanges) captured by the compiled function, and a boolean mask passed into it; a second
call with other queries replays the compiled graph. The fast CPU backend evaluates its inputs,
which MLX refuses while it compiles: it raises MLX's ValueError, not a crash. Key ranges passed
into a compiled function raise it on every backend (their checks read the values). README,
"Inside mx.compile".
"""

import mlx.core as mx
import pytest

import fusedattend as fa

TRACING_REFUSED = "function transformations"  # MLX's message for an evaluation while compiling


def _inputs(S, quantized):
    key = mx.random.key(S)
    kq, kk, kv = mx.random.split(key, 3)
    q = mx.random.normal((2, 8, 1, 64), key=kq).astype(mx.bfloat16)
    k = mx.random.normal((2, 2, S, 64), key=kk).astype(mx.bfloat16)
    v = mx.random.normal((2, 2, S, 64), key=kv).astype(mx.bfloat16)
    if quantized:
        return q, fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
    return q, k, v


def _call(quantized):
    if quantized:
        return lambda q, k, v, **kw: fa.quantized_decode_attention(q, k, v, group_size=32, **kw)
    return fa.decode_attention


EXTRAS = {
    "none": lambda S: {},
    "causal": lambda S: {"mask": "causal"},
    "bool_mask": lambda S: {"mask": mx.arange(S) % 3 != 0},
    "key_ranges": lambda S: {"key_ranges": mx.array([[0, S], [S // 3, S // 2]], dtype=mx.int32)},
    "KeyRanges": lambda S: {"key_ranges": fa.KeyRanges([(0, S), (S // 3, S // 2)])},
}


@pytest.mark.parametrize("extra", list(EXTRAS))
@pytest.mark.parametrize("S", [300, 1500])
@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "q4"])
def test_compiled_call_gives_the_same_bits(backend, quantized, S, extra):
    q, k, v = _inputs(S, quantized)
    kw = EXTRAS[extra](S)
    call = _call(quantized)
    compiled = mx.compile(lambda q: call(q, k, v, backend=backend, **kw))
    if backend == "cpu":
        with pytest.raises(ValueError, match=TRACING_REFUSED):
            mx.eval(compiled(q))
        return
    eager = call(q, k, v, backend=backend, **kw)
    mx.eval(eager)
    assert mx.array_equal(compiled(q), eager).item()
    q2 = q * 2
    assert mx.array_equal(compiled(q2), call(q2, k, v, backend=backend, **kw)).item()


@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "q4"])
def test_mask_passed_into_a_compiled_call(backend, quantized):
    q, k, v = _inputs(1500, quantized)
    mask = mx.arange(1500) % 5 != 0
    call = _call(quantized)
    compiled = mx.compile(lambda q, mask: call(q, k, v, mask=mask, backend=backend))
    if backend == "cpu":
        with pytest.raises(ValueError, match=TRACING_REFUSED):
            mx.eval(compiled(q, mask))
        return
    eager = call(q, k, v, mask=mask, backend=backend)
    mx.eval(eager)
    assert mx.array_equal(compiled(q, mask), eager).item()
    assert mx.array_equal(compiled(q, ~mask), call(q, k, v, mask=~mask, backend=backend)).item()


def test_key_ranges_passed_into_a_compiled_call_are_refused(backend):
    q, k, v = _inputs(300, False)
    ranges = mx.array([[0, 300], [10, 100]], dtype=mx.int32)
    compiled = mx.compile(lambda q, ranges: fa.decode_attention(q, k, v, key_ranges=ranges, backend=backend))
    with pytest.raises(ValueError, match=TRACING_REFUSED):
        mx.eval(compiled(q, ranges))
