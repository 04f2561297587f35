"""Sweep the GPU schedule constants of fusedattend.gpu on decode shapes (H_q=32, H_kv=8, D=128).

Each variant overrides module constants (ELEMENTS_PER_LANE, KEY_BYTES_IN_FLIGHT,
QUANTIZED_KEYS_IN_FLIGHT, SIMDGROUPS, MAX_ROWS, TARGET_BLOCKS, ...). Prints µs per call (best of 5 samples of 20 queued calls, in each of
SWEEP_ROUNDS (3) rounds in which the variants take turns),
GB/s, the ratio to mx.fast.scaled_dot_product_attention and the max error against the reference
computed on the CPU stream. Writes $OUT/schedule_sweep.json (or ./schedule_sweep.json).

    python ci/gpu/schedule_sweep.py '{}' '{"KEY_BYTES_IN_FLIGHT": 64}' '{"SIMDGROUPS": 8}'
    SWEEP_SHAPES=1x512,32x512 python ci/gpu/schedule_sweep.py '{}'     # B x S shapes other than the five
"""
import json
import os
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu


def decode_inputs(B, S):
    """q, k, v of the issue's shapes: bf16, H_q = 32, H_kv = 8, D = 128, L = 1 (evaluated)."""
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    v = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    mx.eval(q, k, v)
    return q, k, v


ROUNDS = int(os.environ.get("SWEEP_ROUNDS", 3))


def bench(fn, reps=20, iters=5):
    mx.eval(fn())
    best = 1e9
    for _ in range(iters):
        t = time.perf_counter()
        mx.eval([fn() for _ in range(reps)])
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6


def main():
    variants = [json.loads(a) for a in sys.argv[1:]] or [{}]
    shapes = [tuple(int(x) for x in shape.split("x"))
              for shape in os.environ.get("SWEEP_SHAPES", "1x2048,1x32768,8x8192,32x2048,32x32768").split(",")]
    data = {}
    for B, S in shapes:
        q, k, v = decode_inputs(B, S)
        kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
        mx.eval(q, k, v, kq, vq)
        with mx.stream(mx.cpu):
            ref = fa.decode_attention(q, k, v, backend="reference")
            mx.eval(ref)
        t_mlx = bench(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5))
        data[(B, S)] = (q, k, v, kq, vq, ref, t_mlx)
    defaults = {name: getattr(gpu, name) for var in variants for name in var}

    def use(var):
        for name, value in {**defaults, **var}.items():
            setattr(gpu, name, value)
        gpu._schedule.cache_clear()  # the schedule is cached per problem shape

    rows = []
    for (B, S), (q, k, v, kq, vq, ref, t_mlx) in data.items():
        # Variants take turns, ROUNDS times, and each keeps its best: the GPU's and the host's
        # drift over a sweep then weighs on every variant alike.
        best = {}
        for _ in range(ROUNDS):
            t_mlx = min(t_mlx, bench(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5)))
            for i, var in enumerate(variants):
                use(var)
                t = bench(lambda: fa.decode_attention(q, k, v, backend="cuda"))
                t_q4 = bench(lambda: fa.quantized_decode_attention(q, kq, vq, backend="cuda"))
                old = best.get(i, (1e9, 1e9))
                best[i] = (min(old[0], t), min(old[1], t_q4))
        for i, var in enumerate(variants):
            use(var)
            out = fa.decode_attention(q, k, v, backend="cuda")
            err = mx.max(mx.abs(out.astype(mx.float32) - ref.astype(mx.float32))).item()
            t, t_q4 = best[i]
            gbs = 2 * B * 8 * S * 128 * 2 / (t * 1e3)
            r = dict(var=var, B=B, S=S, us=round(t, 1), q4_us=round(t_q4, 1), mlx_us=round(t_mlx, 1),
                     GBs=round(gbs), vs_mlx=round(t_mlx / t, 2), err=err)
            rows.append(r)
            print(json.dumps(r), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "schedule_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
