"""Sweep the GPU schedule constants of fusedattend.gpu on decode shapes (H_q=32, H_kv=8, D=128).

Each variant overrides module constants (ELEMENTS_PER_LANE, KEY_BYTES_IN_FLIGHT,
QUANTIZED_KEYS_IN_FLIGHT, SIMDGROUPS, MAX_ROWS, TARGET_BLOCKS, SINGLE_PASS_MAX_S, ...). Prints µs
per call (best of 5 samples of 20 queued calls, kept over SWEEP_ROUNDS (3) rounds in which the
variants take turns), GB/s, the ratio to mx.fast.scaled_dot_product_attention and the max error
against the reference computed on the CPU stream. Writes $OUT/schedule_sweep.json (or
./schedule_sweep.json).

    python ci/gpu/schedule_sweep.py '{}' '{"KEY_BYTES_IN_FLIGHT": 64}' '{"SIMDGROUPS": 8}'
    SWEEP_SHAPES=1x512,32x512 python ci/gpu/schedule_sweep.py '{}'     # B x S shapes other than the five
    SWEEP_COLD_MB=200 python ci/gpu/schedule_sweep.py '{}' '{"SINGLE_PASS_MAX_S": 0}'   # K/V not in L2
    SWEEP_CHAIN=1 SWEEP_COLD_MB=200 python ci/gpu/schedule_sweep.py ...   # calls one after the other
    SWEEP_PLAIN_ONLY=1 python ci/gpu/schedule_sweep.py ...   # bf16 K/V only
    python ci/gpu/schedule_sweep.py --summary sweep.log   # a sweep's rows (its JSON or log) as a table

The sweep ends with the same table: a line per shape, the µs of each variant in the order given.

A variant's "METAL" names another folder of kernel sources (say metal/ of an earlier commit),
to time two versions of the kernels in one run:

    mkdir old && git show HEAD~1:metal/decode_attention.metal > old/decode_attention.metal ...
    python ci/gpu/schedule_sweep.py '{"METAL": "old"}' '{}'
"""
import itertools
import json
import os
import sys
from pathlib import Path

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu
from fusedattend.bench import Chain, cold_cases, time_call


def decode_inputs(B, S):
    """q, k, v of the issue's shapes: bf16, H_q = 32, H_kv = 8, D = 128, L = 1 (evaluated)."""
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    v = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    mx.eval(q, k, v)
    return q, k, v


ROUNDS = int(os.environ.get("SWEEP_ROUNDS", 3))
# SWEEP_COLD_MB: consecutive calls read different copies of K/V, this many MB in all, so that a
# small cache is not served from L2 (50 MB on the H200) as when every call reads the same one.
COLD_BYTES = int(os.environ.get("SWEEP_COLD_MB", 0)) * 2 ** 20


class Caches:
    """Copies of one shape's K/V, plain (bf16) and 4-bit, made by fusedattend.bench.cold_cases
    (enough of each to hold COLD_BYTES); `next()` hands them out in turn."""

    def __init__(self, B, S):
        plain = cold_cases(B, S, "bfloat16", COLD_BYTES)
        self.q = plain[0]["q"]
        self.plain = itertools.cycle([(c["k"], c["v"]) for c in plain])
        self.quantized = itertools.cycle([(c["kq"], c["vq"]) for c in cold_cases(B, S, "q4", COLD_BYTES)])
        self.first = plain[0]["k"], plain[0]["v"]

    def next(self, quantized=False):
        return next(self.quantized if quantized else self.plain)


# SWEEP_CHAIN=1: each call's query is the previous call's output (fusedattend.bench.Chain), so
# that calls run one after the other on the GPU, as a model's layers do. Otherwise the 20 queued
# calls are independent and MLX may run them side by side, which flatters launches of few
# threadgroups.
CHAIN = os.environ.get("SWEEP_CHAIN") == "1"
# SWEEP_PLAIN_ONLY=1: time bf16 K/V only (the 4-bit column reads 0), for variants that change
# only the plain kernels.
PLAIN_ONLY = os.environ.get("SWEEP_PLAIN_ONLY") == "1"


def queued_us(fn):
    """µs per call of fn(): the best of 5 samples of 20 queued calls."""
    return min(time_call(fn, repeats=5, inner=20)) * 1e6


def bench(call, q, next_kv):
    """queued_us of call(q, k, v) over the K/V copies next_kv() hands out."""
    links = Chain(CHAIN)
    return queued_us(lambda: links.keep("call", call(links.query("call", q), *next_kv())))


def read_rows(path):
    """A sweep's rows from its JSON file or its log (one JSON row a line among other lines)."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def summary(rows):
    """A line per shape: B, S, MLX's µs, then each variant's bf16 µs (and 4-bit µs after a slash
    where the sweep timed it), in the order the variants were given."""
    shapes = {}
    for r in rows:
        shapes.setdefault((r["B"], r["S"]), []).append(r)
    cells = {shape: [f"{r['us']:.1f}" + (f" / {r['q4_us']:.1f}" if r["q4_us"] else "") for r in shape_rows]
             for shape, shape_rows in shapes.items()}
    width = max(len(c) for row in cells.values() for c in row) + 2
    first = next(iter(shapes.values()))
    lines = ["   B      S      mlx  variants: " + "  ".join(json.dumps(r["var"]) for r in first)]
    for (B, S), shape_rows in shapes.items():
        lines.append(f"{B:>4} {S:>6} {shape_rows[0]['mlx_us']:>8.1f}" + "".join(c.rjust(width) for c in cells[B, S]))
    return lines


def main():
    if sys.argv[1:2] == ["--summary"]:
        print("\n".join(summary(read_rows(sys.argv[2]))))
        return
    variants = [json.loads(a) for a in sys.argv[1:]] or [{}]
    shapes = [tuple(int(x) for x in shape.split("x"))
              for shape in os.environ.get("SWEEP_SHAPES", "1x2048,1x32768,8x8192,32x2048,32x32768").split(",")]
    data = {}
    for B, S in shapes:
        caches = Caches(B, S)
        q, (k, v) = caches.q, caches.first
        with mx.stream(mx.cpu):
            ref = fa.decode_attention(q, k, v, backend="reference")
            mx.eval(ref)
        data[(B, S)] = (q, k, v, caches, ref)
    defaults = {name: getattr(gpu, name) for var in variants for name in var if name != "METAL"}
    kernel_dir, kernel = gpu.kernel_dir, gpu._kernel

    def use(var):
        # schedules and replayed launchers are cached per problem shape: set_constants forgets them
        gpu.set_constants({name: value for name, value in {**defaults, **var}.items() if name != "METAL"})
        # Other sources: read from that folder, under names of their own (MLX caches a compiled
        # kernel by name).
        metal = var.get("METAL")
        gpu.kernel_dir = (lambda: Path(metal)) if metal else kernel_dir
        tag = "".join(c if c.isalnum() else "_" for c in Path(metal or "").name)
        gpu._kernel = (lambda name, *rest, **kw: kernel(f"{name}_{tag}", *rest, **kw)) if metal else kernel

    rows = []
    for (B, S), (q, k, v, caches, ref) in data.items():
        # Variants take turns, ROUNDS times, and each keeps its best: the GPU's and the host's
        # drift over a sweep then weighs on every variant alike.
        best = {}
        t_mlx = 1e9
        for r in range(ROUNDS):
            t_mlx = min(t_mlx, bench(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5),
                                     q, caches.next))
            # Each round starts at another variant: chained B = 1 calls ran 10-25% slower as the
            # second of two variants, whichever it was (docs/h200/offsets/).
            for i in [(r + j) % len(variants) for j in range(len(variants))]:
                var = variants[i]
                use(var)
                t = bench(lambda q, k, v: fa.decode_attention(q, k, v, backend="cuda"), q, caches.next)
                t_q4 = 0.0 if PLAIN_ONLY else bench(
                    lambda q, k, v: fa.quantized_decode_attention(q, k, v, backend="cuda"), q,
                    lambda: caches.next(quantized=True))
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
    print("\n".join(summary(rows)), flush=True)


if __name__ == "__main__":
    main()
