"""Time GPU schedule policies against each other on decode shapes (H_q = 32, H_kv = 8, D = 128).

Answers: is a Policy (fusedattend/gpu/schedule.py) faster than the shipped one, and where? Each
variant is a JSON object of Policy fields to replace (what FUSEDATTEND_SCHEDULE=path.json takes;
`{}` is the shipped policy); the sweep writes each to a file and points FUSEDATTEND_SCHEDULE at
it while the variant runs. A variant's "metal" names another folder of kernel sources (say metal/
of an earlier commit), to time two versions of the kernels in one run. Prints, per shape and
variant, µs a call of bf16 and of 4-bit K/V (best of 5 samples of 20 queued calls, kept over
--rounds rounds in which the variants take turns), GB/s, the ratio to
mx.fast.scaled_dot_product_attention and the max error against the reference on the CPU stream;
then a line per shape with each variant's µs in the order given. Writes
$OUT/schedule_sweep.json (or ./schedule_sweep.json). On a GPU machine, from the repository root:

    python tools/schedule_sweep.py '{}' '{"key_bytes_in_flight": 64}' '{"simdgroups": 8}'
    python tools/schedule_sweep.py --shapes 1x512,32x512 --cold-mb 200 --chain '{}' '{"single_pass_max_s": 0}'
    python tools/schedule_sweep.py '{"metal": "/tmp/old"}' '{}'
    python tools/schedule_sweep.py --summary schedule_sweep.json   # a sweep's rows (JSON or log) as the table
"""

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

import fusedattend as fa  # noqa: E402
from fusedattend import backends  # noqa: E402
from fusedattend.gpu import launch as gpu_launch, schedule, sources  # noqa: E402

from fusedattend.benchmarks.harness import Chain, cold_cases, time_call  # noqa: E402


class Caches:
    """Copies of one shape's K/V, bf16 and 4-bit, enough of each to hold cold_bytes (0: one);
    `next()` hands them out in turn, so that a small cache is not served from L2 every call."""

    def __init__(self, B, S, cold_bytes):
        plain = cold_cases(B, S, "bfloat16", cold_bytes)
        self.q = plain[0]["q"]
        self.first = plain[0]["k"], plain[0]["v"]
        self.plain = itertools.cycle([(c["k"], c["v"]) for c in plain])
        self.quantized = itertools.cycle([(c["kq"], c["vq"]) for c in cold_cases(B, S, "q4", cold_bytes)])

    def next(self, quantized=False):
        return next(self.quantized if quantized else self.plain)


class Variants:
    """The variants' policy files; use(i) puts variant i in force."""

    def __init__(self, variants, folder):
        self.files, self.metal = [], [v.get("metal") for v in variants]
        for i, var in enumerate(variants):
            path = Path(folder) / f"policy{i}.json"
            path.write_text(json.dumps({k: v for k, v in var.items() if k != "metal"}))
            schedule.load_policy(str(path))  # a bad field fails here, before any timing
            self.files.append(str(path))
        self.kernel_dir, self.in_use = sources.kernel_dir, None

    def use(self, i):
        # Schedules and replays are keyed by FUSEDATTEND_SCHEDULE's value: nothing to forget.
        os.environ[schedule.SCHEDULE_ENV] = self.files[i]
        metal = self.metal[i]
        if metal != self.in_use:  # kernel objects and replays hold the sources they were made from
            sources.kernel_dir = (lambda: Path(metal)) if metal else self.kernel_dir
            gpu_launch._kernel.cache_clear()
            backends.forget_replays()
            self.in_use = metal


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


def sweep(args, variants, chosen):
    def bench(call, q, next_kv):
        """µs a call of call(q, k, v) over the K/V copies next_kv() hands out: best of 5 x 20.
        --chain: each call's query is the previous call's output (a chain of its own)."""
        links = Chain(args.chain)
        return min(time_call(lambda: links.keep("call", call(links.query("call", q), *next_kv())),
                             repeats=5, inner=20)) * 1e6

    rows = []
    for B, S in args.shapes:
        caches = Caches(B, S, args.cold_mb * 2 ** 20)
        q, (k, v) = caches.q, caches.first
        with mx.stream(mx.cpu):
            ref = fa.decode_attention(q, k, v, backend="reference")
            mx.eval(ref)
        best, t_mlx = {}, 1e9
        for r in range(args.rounds):
            t_mlx = min(t_mlx, bench(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5),
                                     q, caches.next))
            # Each round starts at another variant: the second of two variants ran slower at B = 1,
            # whichever it was, so the order must not favour one.
            for i in [(r + j) % len(variants) for j in range(len(variants))]:
                chosen.use(i)
                t = bench(lambda q, k, v: fa.decode_attention(q, k, v, backend="cuda"), q, caches.next)
                t_q4 = 0.0 if args.plain_only else bench(
                    lambda q, k, v: fa.quantized_decode_attention(q, k, v, backend="cuda"), q,
                    lambda: caches.next(quantized=True))
                old = best.get(i, (1e9, 1e9))
                best[i] = (min(old[0], t), min(old[1], t_q4))
        for i, var in enumerate(variants):
            chosen.use(i)
            out = fa.decode_attention(q, k, v, backend="cuda")
            err = mx.max(mx.abs(out.astype(mx.float32) - ref.astype(mx.float32))).item()
            t, t_q4 = best[i]
            row = dict(var=var, B=B, S=S, us=round(t, 1), q4_us=round(t_q4, 1), mlx_us=round(t_mlx, 1),
                       GBs=round(2 * B * 8 * S * 128 * 2 / (t * 1e3)), vs_mlx=round(t_mlx / t, 2), err=err)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("variants", nargs="*", default=["{}"], help="JSON objects of Policy fields (and \"metal\")")
    p.add_argument("--shapes", default="1x2048,1x32768,8x8192,32x2048,32x32768", help="B x S shapes, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold-mb", type=int, default=0, help="calls read copies of K/V this many MB in all (not in L2)")
    p.add_argument("--chain", action="store_true", help="calls one after the other, as a model's layers")
    p.add_argument("--plain-only", action="store_true", help="bf16 K/V only (the 4-bit column reads 0)")
    p.add_argument("--summary", metavar="FILE", help="print a sweep's table from its JSON or log, and stop")
    args = p.parse_args()
    if args.summary:
        print("\n".join(summary(read_rows(args.summary))))
        return
    args.shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    variants = [json.loads(a) for a in args.variants]
    with tempfile.TemporaryDirectory() as folder:
        rows = sweep(args, variants, Variants(variants, folder))
    with open(os.path.join(os.environ.get("OUT", "."), "schedule_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(summary(rows)), flush=True)


if __name__ == "__main__":
    main()
