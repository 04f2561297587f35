"""Where a small queued call's time goes, without a profiler: building the calls against evaluating them.

    python3 ci/gpu/small_calls.py [--shapes 1x512,1x2048,1x8192,8x2048] [--cold-mb 0,200] [--samples 7]
    # writes $OUT/small_calls[_<tag>].json if OUT is set (tag: --tag, e.g. the MLX settings of the run)

A benchmark sample (fusedattend.bench.time_call) builds `inner` calls, then evaluates them once.
For each shape, format, cold-cache size and implementation this times samples the same way and
splits each into its build (the calls made, before mx.eval) and its evaluation (mx.eval: MLX's
graph nodes, the CUDA graph's launch, the GPU and the sync). Rows: µs a call, best sample by
total, with the build and evaluation of that sample, and the median total.
Implementations: --backend (ours, cuda by default) and the format's peers (mx.fast.sdpa for bf16, mlx_lm.qsdpa and
dequant+sdpa for 4-bit).
"""
import argparse
import json
import os
import statistics
import time

import mlx.core as mx

from fusedattend.bench import cold_cases, in_turn

PEERS = {"bfloat16": ("mx.fast.sdpa",), "q4": ("mlx_lm.qsdpa", "dequant+sdpa")}


def split_samples(fn, inner, samples):
    """[(build_s, eval_s)] a call, one per sample, after two warm-up samples."""
    for _ in range(2):
        mx.eval([fn() for _ in range(inner)])
    rows = []
    for _ in range(samples):
        t0 = time.perf_counter()
        outs = [fn() for _ in range(inner)]
        t1 = time.perf_counter()
        mx.eval(outs)
        t2 = time.perf_counter()
        rows.append(((t1 - t0) / inner, (t2 - t1) / inner))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="1x512,1x2048,1x8192,8x2048")
    p.add_argument("--formats", default="bfloat16,q4")
    p.add_argument("--cold-mb", default="0,200")
    p.add_argument("--inner", type=int, default=20)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--backend", default="cuda", help="ours: a fusedattend backend")
    p.add_argument("--tag", default="")
    args = p.parse_args()
    results = []
    print(f"{'fmt':>8} {'B':>3} {'S':>6} {'cold':>5} {'impl':>14} {'best':>7} {'build':>7} {'eval':>7} {'median':>7}  (us a call)")
    for shape in args.shapes.split(","):
        B, S = (int(x) for x in shape.split("x"))
        for fmt in args.formats.split(","):
            for cold in (int(x) for x in args.cold_mb.split(",")):
                cases = cold_cases(B, S, fmt, cold << 20)
                impls = in_turn(cases, [args.backend])
                for name in (args.backend, *PEERS[fmt]):
                    rows = split_samples(impls[name], args.inner, args.samples)
                    build, evaluate = min(rows, key=sum)
                    row = dict(fmt=fmt, B=B, S=S, cold_mb=cold, copies=len(cases), impl=name,
                               best_us=(build + evaluate) * 1e6, build_us=build * 1e6, eval_us=evaluate * 1e6,
                               median_us=statistics.median(sum(r) for r in rows) * 1e6)
                    results.append(row)
                    print(f"{fmt:>8} {B:>3} {S:>6} {cold:>5} {name:>14} {row['best_us']:7.1f} {row['build_us']:7.1f} "
                          f"{row['eval_us']:7.1f} {row['median_us']:7.1f}", flush=True)
                del cases, impls
    if os.environ.get("OUT"):
        tag = f"_{args.tag}" if args.tag else ""
        meta = dict(mlx=mx.__version__, env={k: v for k, v in os.environ.items() if k.startswith("MLX_")}, args=vars(args))
        with open(os.path.join(os.environ["OUT"], f"small_calls{tag}.json"), "w") as f:
            json.dump(dict(meta=meta, rows=results), f, indent=1)


if __name__ == "__main__":
    main()
