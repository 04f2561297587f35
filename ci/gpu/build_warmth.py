"""Does a queued sample's graph building slow down after a long evaluation? (The host core idles.)

    python3 ci/gpu/build_warmth.py [B S ...]     # default: 1 2048 32 2048 32 32768
    python3 ci/gpu/build_warmth.py --stub 8 512  # anywhere: kernels stubbed (ci/host_cost.py)

The tables' samples build 20 calls (Python and MLX's graph), then mx.eval runs them. Building
took longer at large shapes for the same Python (docs/h200/journal.md, "Host build against evaluation":
20.9 µs a call at B = 1, S = 2048, 35.5 at S = 32768; MLX's SDPA too). One explanation: while
mx.eval waits for a long sample, the host thread sleeps, and the next build starts on a core
that has clocked down and lost its caches. This times each sample's build after its evaluation
with nothing between (as the benchmark does), after a 2 ms busy spin on the host (the core kept
awake; the GPU idle either way), and after a 10 ms sleep, rounds interleaved. It also prints the
share of an evaluation's wall time the host thread spent on the CPU (time.thread_time): near 1
if MLX spins while it waits, near 0 if it sleeps.

Cases as in the cold table (fusedattend.bench.cold_cases, 200 MB of K/V copies in turn, calls
independent). Prints one JSON line a case and condition: build µs a call (median, least),
evaluation µs a call (median), the host thread's CPU share during evaluation (median).
"""
import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fusedattend.bench import cold_cases, in_turn  # noqa: E402

import build_probe_args  # noqa: E402

IMPLS = {"bfloat16": ["cuda", "mx.fast.sdpa"], "q4": ["cuda", "mlx_lm.qsdpa"]}
INNER = 20


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


CONDITIONS = {"as benchmarked": lambda: None, "spin 2 ms": lambda: spin(0.002),
              "sleep 10 ms": lambda: time.sleep(0.010)}


def sample(call, before):
    """(build s, eval s, host thread's CPU share during eval) of one sample of INNER calls."""
    before()
    t0 = time.perf_counter()
    outs = [call() for _ in range(INNER)]
    t1 = time.perf_counter()
    c1 = time.thread_time()
    mx.eval(outs)
    t2 = time.perf_counter()
    c2 = time.thread_time()
    return t1 - t0, t2 - t1, (c2 - c1) / max(t2 - t1, 1e-9)


def main():
    args = build_probe_args.parse(__doc__, [1, 2048, 32, 2048, 32, 32768])
    backends = ["cuda"]
    for B, S in args.pairs:
        for fmt, names in IMPLS.items():
            impls = in_turn(cold_cases(B, S, fmt, args.cold_mb << 20), backends)
            for name in names:
                if name not in impls:
                    continue
                call = impls[name]
                for _ in range(3):
                    sample(call, lambda: None)
                runs = {c: [] for c in CONDITIONS}
                for _ in range(args.rounds):
                    for cond, before in CONDITIONS.items():
                        runs[cond].append(sample(call, before))
                for cond, rows in runs.items():
                    build = [r[0] / INNER * 1e6 for r in rows]
                    print(json.dumps({
                        "B": B, "S": S, "fmt": fmt, "impl": name, "before build": cond,
                        "build_us": round(statistics.median(build), 2),
                        "build_min_us": round(min(build), 2),
                        "eval_us": round(statistics.median(r[1] / INNER * 1e6 for r in rows), 2),
                        "eval_cpu_share": round(statistics.median(r[2] for r in rows), 3)}),
                        flush=True)


if __name__ == "__main__":
    main()
