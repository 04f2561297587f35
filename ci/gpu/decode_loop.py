"""A decode loop's attention calls, the cache growing a key a step, against calls at one fixed S.

    python3 ci/gpu/decode_loop.py [B S0] [--steps 20] [--rounds 7]   # default B = 1, S0 = 4096
    python3 ci/gpu/decode_loop.py --table decode_loop_*.json          # their queued rows as one table

mlx_lm's caches hand each step the first S keys of a preallocated buffer (slices), S one more
every step, so no two steps of a loop share a shape. H_q = 32, H_kv = 8, D = 128, L = 1, bf16
(4-bit: group size 64). For ours (bf16 and 4-bit), mx.fast.scaled_dot_product_attention and
mlx_lm's 4-bit path, µs a step, the best of `rounds`:
- `queued`: `steps` steps built, then evaluated once, each step's query the step before's output
  (as a model's layers chain);
- `host`: the same steps' calls made and dropped, never evaluated (each from the first query);
each with the cache growing (S0, S0 + 1, ...; slicing included; the same S sequence for every
implementation) and at S0 every step. An
implementation that raises (mlx_lm's 4-bit path on MLX's CUDA backend from S = 2049 on) is
recorded with its error. Writes $OUT/decode_loop_B_S0.json.
"""
import argparse
import itertools
import json
import os
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend.bench import first_keys, growing_loop, time_call

H_Q, H_KV, D, GROUP_SIZE, BITS = 32, 8, 128, 64, 4


def table(results) -> str:
    """Markdown: per shape, queued µs a step with the cache growing (and at one S), ours against
    MLX's SDPA (bf16) and mlx_lm (4-bit)."""
    def cell(r, name):
        grow, fixed = r.get(f"queued: {name}, growing"), r.get(f"queued: {name}, fixed S")
        return "fails" if f"error: {name}" in r else "–" if grow is None else f"{grow:.1f} ({fixed:.1f})"

    def ratio(r, peer, ours):
        a, b = r.get(f"queued: {peer}, growing"), r.get(f"queued: {ours}, growing")
        return f"{a / b:.2f}x" if a and b else "–"

    lines = ["| B | S0 | fused bf16 | mx.fast.sdpa | bf16 vs sdpa | fused 4-bit | mlx_lm 4-bit | 4-bit vs mlx_lm "
             "| 4-bit vs sdpa |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["B"], r["S0"])):
        lines.append(f"| {r['B']} | {r['S0']} | {cell(r, 'fused bf16')} | {cell(r, 'mx.fast.sdpa')} | "
                     f"{ratio(r, 'mx.fast.sdpa', 'fused bf16')} | {cell(r, 'fused 4-bit')} | {cell(r, 'mlx_lm 4-bit')} | "
                     f"{ratio(r, 'mlx_lm 4-bit', 'fused 4-bit')} | {ratio(r, 'mx.fast.sdpa', 'fused 4-bit')} |")
    return "\n".join(lines)


def main():
    if sys.argv[1:2] == ["--table"]:
        print(table([json.load(open(path)) for path in sys.argv[2:]]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("B", type=int, nargs="?", default=1)
    p.add_argument("S0", type=int, nargs="?", default=4096)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    B, S0, room = args.B, args.S0, 4096
    q = mx.random.normal((B, H_Q, 1, D)).astype(mx.bfloat16)
    k, v = (mx.random.normal((B, H_KV, S0 + room, D)).astype(mx.bfloat16) for _ in range(2))
    kq, vq = fa.quantize_kv(k, bits=BITS, group_size=GROUP_SIZE), fa.quantize_kv(v, bits=BITS, group_size=GROUP_SIZE)
    mx.eval(q, k, v, kq, vq)
    scale = D ** -0.5

    impls = {
        "fused bf16": lambda x, S: fa.decode_attention(x, first_keys(k, S), first_keys(v, S), scale=scale,
                                                       backend="cuda"),
        "fused 4-bit": lambda x, S: fa.quantized_decode_attention(x, first_keys(kq, S), first_keys(vq, S), scale=scale,
                                                                  bits=BITS, group_size=GROUP_SIZE, backend="cuda"),
        "mx.fast.sdpa": lambda x, S: mx.fast.scaled_dot_product_attention(x, first_keys(k, S), first_keys(v, S),
                                                                          scale=scale),
    }
    try:
        from mlx_lm.models.base import quantized_scaled_dot_product_attention as qsdpa

        impls["mlx_lm 4-bit"] = lambda x, S: qsdpa(x + 0, first_keys(kq, S), first_keys(vq, S), scale, None,
                                                   group_size=GROUP_SIZE, bits=BITS)
    except ImportError:
        pass

    def queued(fn, grow):
        # Each implementation's own loop (bench.growing_loop), so that all read the same sequence of
        # S (before 2026-12-02 one counter ran on through every implementation: MLX's SDPA, timed
        # after ours, read S0 + 3141 to S0 + 3280 keys where ours read S0 + 21 to S0 + 160); room 1:
        # S0 every step.
        steps = growing_loop(fn, q, S0, args.steps, room if grow else 1)
        return min(time_call(steps, repeats=args.rounds)) / args.steps * 1e6

    def host(fn, grow):
        # Calls made and dropped, each from the first query; S goes on where queued's loop stopped.
        first = (args.rounds + 1) * args.steps if grow else 0
        sizes = itertools.count(first)
        best = float("inf")
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(args.steps * 10):
                fn(q, S0 + (next(sizes) % room if grow else 0))
            best = min(best, (time.perf_counter() - t0) / (args.steps * 10))
        return best * 1e6

    result = dict(B=B, S0=S0, steps=args.steps, rounds=args.rounds, mlx=mx.__version__)
    for name, fn in impls.items():
        try:
            mx.eval(fn(q, S0))
        except RuntimeError as e:  # mlx_lm's 4-bit path on MLX's CUDA backend past S = 2048
            result[f"error: {name}"] = str(e)
            print(f"{name:14s} fails: {e}", flush=True)
            continue
        for grow in (True, False):
            form = "growing" if grow else "fixed S"
            result[f"queued: {name}, {form}"] = round(queued(fn, grow), 1)
            result[f"host: {name}, {form}"] = round(host(fn, grow), 2)
            print(f"{name:14s} {form:8s} queued {result[f'queued: {name}, {form}']:8.1f} µs a step, "
                  f"host {result[f'host: {name}, {form}']:6.2f} µs a call", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"decode_loop_{B}_{S0}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
