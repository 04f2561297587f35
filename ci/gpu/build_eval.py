"""Host graph building against evaluation, for chained decode calls at B = 1.

    python ci/gpu/build_eval.py [S ...]      # default S = 2048 32768

MLX is lazy: a sample of 20 calls first builds their graph in Python (argument checks, launch
set-up, the mx.fast.cuda_kernel calls), then mx.eval encodes and runs it; the two add up in a
queued benchmark. For fused bf16, fused 4-bit and mx.fast.scaled_dot_product_attention (H_q = 32,
H_kv = 8, D = 128, L = 1, K/V in L2), each of 20 calls taking the previous output as its query,
prints µs per call of building, of evaluating and of both (the round of least total of 25 after 5
warm-up), and the least building time of any round (the host's own spread apart from the GPU's).
"""
import sys
import time

import mlx.core as mx

import fusedattend as fa


def main(lengths):
    for S in lengths:
        q = mx.random.normal((1, 32, 1, 128)).astype(mx.bfloat16)
        k = mx.random.normal((1, 8, S, 128)).astype(mx.bfloat16)
        v = mx.random.normal((1, 8, S, 128)).astype(mx.bfloat16)
        kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
        mx.eval(q, k, v, kq, vq)
        ops = {
            "bf16": lambda x: fa.decode_attention(x, k, v, backend="cuda"),
            "q4": lambda x: fa.quantized_decode_attention(x, kq, vq, backend="cuda"),
            "sdpa": lambda x: mx.fast.scaled_dot_product_attention(x, k, v, scale=128 ** -0.5),
        }
        for name, op in ops.items():
            rows = []
            for r in range(30):
                t0 = time.perf_counter()
                x = q
                for _ in range(20):
                    x = op(x)
                t1 = time.perf_counter()
                mx.eval(x)
                t2 = time.perf_counter()
                if r >= 5:
                    rows.append(((t1 - t0) / 20 * 1e6, (t2 - t1) / 20 * 1e6, (t2 - t0) / 20 * 1e6))
            best = min(rows, key=lambda row: row[2])
            least_build = min(row[0] for row in rows)
            print(f"S={S} {name:5s} build {best[0]:6.1f} µs/call  eval {best[1]:6.1f}  total {best[2]:6.1f}"
                  f"  (least build of any round {least_build:6.1f})", flush=True)


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [2048, 32768])
