"""The short 4-bit decode loop of tests/perf, timed many times in one process: which level it takes.

    python3 ci/gpu/loop_levels.py [--samples 40] [--fmt q4] [--label NAME]   # writes $OUT/levels_NAME.json

`test_decode_loop[cuda-B*-S64-q4]` reads either about 36-49 or 60-70 µs a call on the H100, run
to run (docs/h100/retime-s64/; what this script found: docs/h100/loop-levels/). This builds the
same loop (H_q = 32, H_kv = 8, D = 128, L = 1, a cache growing from S = 64 to 511 keys, 20
chained steps a sample, group size 64) for B = 1, 8 and 32, and takes `samples` samples of each, B after B in turn, so that a level that changes
within a process shows as a change along one B's samples. Each sample also times the host alone
(the same 20 steps built and dropped, never evaluated): a sample much slower than its host time
waited on the GPU. Times are µs a call; `t` is seconds since the start, to set beside a clock
log (nvidia-smi) taken at the same time.
"""
import argparse
import json
import os
import statistics
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import bench

STEPS, S, END, GROUP_SIZE = 20, 64, 512, 64


def loop_of(B, fmt):
    """(run, host): the timed loop, and the same loop's steps built without evaluation."""
    case = bench.make_case(B, END, "bfloat16")
    q, k, v, scale = case["q"], case["k"], case["v"], case["scale"]
    quantized = bench.is_quantized(fmt)
    if quantized:
        bits = int(fmt[1:])
        k, v = (fa.quantize_kv(x, bits=bits, group_size=GROUP_SIZE) for x in (k, v))
        mx.eval(k, v)

    def step(x, keys):
        kv = bench.first_keys(k, keys), bench.first_keys(v, keys)
        if not quantized:
            return fa.decode_attention(x, *kv, scale=scale)
        return fa.quantized_decode_attention(x, *kv, scale=scale, bits=bits, group_size=GROUP_SIZE)

    return (bench.growing_loop(step, q, S, STEPS, END - S),
            bench.growing_loop(step, q, S, STEPS, END - S))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--fmt", default="q4", choices=["q4", "q8", "bfloat16"])
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    loops = {B: loop_of(B, args.fmt) for B in (1, 8, 32)}
    for run, host in loops.values():  # warm: compile, first replays
        mx.eval(run())
        host()
    start = time.perf_counter()
    result = {"label": args.label, "fmt": args.fmt, "env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")},
              "samples": {B: [] for B in loops}}
    for _ in range(args.samples):
        for B, (run, host) in loops.items():
            t0 = time.perf_counter()
            mx.eval(run())
            t1 = time.perf_counter()
            host()
            t2 = time.perf_counter()
            result["samples"][B].append({"t": round(t0 - start, 4), "us": (t1 - t0) / STEPS * 1e6,
                                         "host_us": (t2 - t1) / STEPS * 1e6})
    for B, rows in result["samples"].items():
        us = [r["us"] for r in rows]
        host_us = [r["host_us"] for r in rows]
        print(f"{args.label} B={B}: median {statistics.median(us):.1f} µs a call (min {min(us):.1f}, max {max(us):.1f}),"
              f" host {statistics.median(host_us):.1f}; along the samples: " + " ".join(f"{u:.0f}" for u in us))
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"levels_{args.label}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
