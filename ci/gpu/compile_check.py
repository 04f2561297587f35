"""Whether the GPU path runs inside mx.compile, as an MLX user's compiled step would call it.

    python3 ci/gpu/compile_check.py     # prints one line a case: ok (bit-identical to the call
                                        # outside compile) or the exception it raised

Cases: plain bf16 and 4-bit K/V, no mask, "causal", a boolean mask array and key_ranges captured
by the compiled function, one block (S = 300) and split (S = 4097), at D = 128 (the issue's).
tests/test_compile.py holds the same kinds of cases as tests (smaller, every backend), and also
arrays passed into the compiled function: key_ranges passed in raise MLX's "Attempting to eval
an array during function transformations" ValueError, as their checks read the values.
"""
import mlx.core as mx

import fusedattend as fa


def cases():
    for S in (300, 4097):
        q = mx.random.normal((2, 8, 1, 128)).astype(mx.bfloat16)
        k = mx.random.normal((2, 2, S, 128)).astype(mx.bfloat16)
        v = mx.random.normal((2, 2, S, 128)).astype(mx.bfloat16)
        kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
        extras = {"none": {}, "causal": {"mask": "causal"}, "bool mask": {"mask": mx.ones((1, S), dtype=mx.bool_)},
                  "key_ranges": {"key_ranges": mx.array([[0, S], [1, S - 1]], dtype=mx.int32)}}
        for label, kw in extras.items():
            yield f"bf16 S={S} {label}", lambda q, kw=kw, k=k, v=v: fa.decode_attention(q, k, v, backend="cuda", **kw), q
            yield (f"q4 S={S} {label}",
                   lambda q, kw=kw, kq=kq, vq=vq: fa.quantized_decode_attention(q, kq, vq, backend="cuda", **kw), q)


def main():
    for label, fn, q in cases():
        eager = fn(q)
        mx.eval(eager)
        try:
            compiled = mx.compile(fn)
            out = compiled(q)
            again = compiled(q * 2)  # a second call replays the compiled graph with other values
            mx.eval(out, again)
            same = mx.array_equal(out, eager).item() and mx.array_equal(again, fn(q * 2)).item()
            print(f"{label}: ok, bit-identical {same}", flush=True)
        except Exception as e:  # noqa: BLE001 - the point is to report what a user would see
            print(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)


if __name__ == "__main__":
    main()
