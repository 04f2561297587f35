"""The cpu backend against mx.fast.scaled_dot_product_attention on mx.cpu, quiet and with the cores loaded.

    python -m fusedattend cpu-contention                  # f32, bf16 x S 1024, 4096
    python -m fusedattend cpu-contention --S 1024,4096,16384 --json rows.json

For each condition, dtype and S it times both implementations in the same run, one after the
other (repeats samples each, after a warm-up), and prints medians, min-max spread and the ratio
mx.fast time / cpu time (> 1: the cpu backend is faster):

    quiet    nothing of ours beside the calls
    loaded   a second process keeps every core busy: one thread per core, each looping numpy
             matmuls with its BLAS held to one thread (GIL released in them, so the threads run
             in parallel). Started before and killed after the loaded rows (try/finally), and
             bounded in time on its own (--load-seconds) should this process die first.

The loader's CPU seconds over its wall time per core (its rusage, read when it is reaped) says
how busy it kept the cores; `os.getloadavg()` before each condition says what else was running.
Shape defaults: B = 1, H_q = 32, H_kv = 8, D = 128, L = 1 (a decode step of a GQA model).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import mlx.core as mx

import fusedattend as fa

from .cli import _csv, _positive  # the bench command's argument types

GOAL = 4.0  # the cpu backend should be >= 4x mx.fast's CPU attention, quiet and loaded
DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}

# The loader: one numpy matmul loop per core, in one process, until its deadline. Its BLAS is held
# to one thread by the environment it is started with, so it runs exactly `cores` busy threads.
_LOADER = r"""
import sys, threading, time
import numpy as np
cores, seconds = int(sys.argv[1]), float(sys.argv[2])
deadline = time.monotonic() + seconds
def spin():
    a = np.random.default_rng(0).random((192, 192), dtype=np.float32)
    out = np.empty_like(a)
    while time.monotonic() < deadline:
        np.matmul(a, a, out=out)
threads = [threading.Thread(target=spin, daemon=True) for _ in range(cores)]
for t in threads:
    t.start()
print("ready", flush=True)
for t in threads:
    t.join()
"""
_ONE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")}


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Loader:
    """What the loader did: cores asked for, wall seconds, CPU seconds (None where unknown)."""

    def __init__(self, n_cores: int):
        self.cores, self.wall_s, self.cpu_s, self.pid = n_cores, None, None, None

    @property
    def busy(self):
        """CPU seconds / (wall seconds x cores): 1.0 = every core kept busy all along."""
        if not self.cpu_s or not self.wall_s:
            return None
        return self.cpu_s / (self.wall_s * self.cores)


@contextlib.contextmanager
def loaded_cores(n_cores: int | None = None, seconds: float = 300.0):
    """A second process keeping n_cores (default: all of ours) busy while the block runs."""
    n_cores = n_cores or cores()
    info = Loader(n_cores)
    env = dict(os.environ, **_ONE_THREAD)
    proc = subprocess.Popen([sys.executable, "-c", _LOADER, str(n_cores), str(seconds)],
                            stdout=subprocess.PIPE, env=env, text=True)
    info.pid = proc.pid
    start = time.monotonic()
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the core loader did not start (exit {proc.poll()})")
        yield info
    finally:
        proc.kill()
        info.wall_s = time.monotonic() - start
        if hasattr(os, "wait4"):
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            info.cpu_s = usage.ru_utime + usage.ru_stime
        else:
            proc.wait()
        proc.stdout.close()


def _case(B, H_q, H_kv, S, D, dtype, seed=0):
    with mx.stream(mx.cpu):
        mx.random.seed(seed)
        q = mx.random.normal((B, H_q, 1, D)).astype(dtype)
        k = mx.random.normal((B, H_kv, S, D)).astype(dtype)
        v = mx.random.normal((B, H_kv, S, D)).astype(dtype)
        mx.eval(q, k, v)
    return q, k, v


def _implementations(q, k, v):
    scale = q.shape[-1] ** -0.5

    def cpu():
        return fa.decode_attention(q, k, v, scale=scale, backend="cpu")

    def mlx():
        with mx.stream(mx.cpu):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)

    return {"cpu": cpu, "mx.fast": mlx}


def time_pair(impls, repeats: int, warmup: int = 2):
    """Seconds per call of each implementation, {name: [seconds]}: each one's warm-up and samples
    in a run of their own. Sampling them call by call in turn measured the cpu backend 1.6-2.4x
    slower than alone (quiet, S = 4096): each call met the caches and threads the other left."""
    samples = {}
    for name, fn in impls.items():
        for _ in range(warmup):
            mx.eval(fn())
        samples[name] = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            mx.eval(fn())
            samples[name].append(time.perf_counter() - t0)
    return samples


def _row(condition, dtype_name, S, shape, samples, load):
    row = {"condition": condition, "dtype": dtype_name, "S": S, **shape, "load_avg_1m": load}
    for name, ts in samples.items():
        row[f"{name}_ms"] = statistics.median(ts) * 1e3
        row[f"{name}_min_ms"] = min(ts) * 1e3
        row[f"{name}_max_ms"] = max(ts) * 1e3
    row["ratio"] = row["mx.fast_ms"] / row["cpu_ms"]
    return row


def measure(dtypes=("float32", "bfloat16"), S_list=(1024, 4096), B=1, H_q=32, H_kv=8, D=128,
            repeats=7, conditions=("quiet", "loaded"), load_cores=None, load_seconds=300.0):
    """Rows (dicts) of medians, spreads and ratios, one per condition x dtype x S."""
    for name in dtypes:
        if name not in DTYPES:
            raise ValueError(f"dtypes: unknown dtype {name!r} (one of {sorted(DTYPES)})")
    for condition in conditions:
        if condition not in ("quiet", "loaded"):
            raise ValueError(f"conditions: {condition!r} is not 'quiet' or 'loaded'")
    shape = {"B": B, "H_q": H_q, "H_kv": H_kv, "D": D}
    cases = {(n, S): _case(B, H_q, H_kv, S, D, DTYPES[n]) for n in dtypes for S in S_list}
    rows = []
    for condition in conditions:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        ctx = loaded_cores(load_cores, load_seconds) if condition == "loaded" else contextlib.nullcontext()
        with ctx as loader:
            part = [_row(condition, n, S, shape, time_pair(_implementations(*cases[n, S]), repeats), load)
                    for n, S in cases]
        if loader is not None:
            for row in part:
                row["loader_cores"], row["loader_busy"] = loader.cores, loader.busy
        rows.extend(part)
    return rows


def format_table(rows) -> str:
    head = f"{'condition':9} {'dtype':9} {'S':>6} {'cpu ms (min-max)':>22} {'mx.fast ms (min-max)':>24} {'ratio':>6}"
    lines = [head]
    for r in rows:
        cpu = f"{r['cpu_ms']:.2f} ({r['cpu_min_ms']:.2f}-{r['cpu_max_ms']:.2f})"
        mlx = f"{r['mx.fast_ms']:.2f} ({r['mx.fast_min_ms']:.2f}-{r['mx.fast_max_ms']:.2f})"
        lines.append(f"{r['condition']:9} {r['dtype']:9} {r['S']:>6} {cpu:>22} {mlx:>24} {r['ratio']:>5.1f}x")
    busy = [r["loader_busy"] for r in rows if r.get("loader_busy") is not None]
    loads = sorted({(r["condition"], r["load_avg_1m"]) for r in rows if r["load_avg_1m"] is not None})
    if busy:
        lines.append(f"loader: {rows[-1]['loader_cores']} busy threads, kept {busy[0]:.0%} of them busy")
    lines.append("load average (1 min) before: " + ", ".join(f"{c} {v:.2f}" for c, v in loads))
    worst = min(r["ratio"] for r in rows)
    lines.append(f"goal >= {GOAL:g}x in every row: {'met' if worst >= GOAL else 'missed'} (lowest {worst:.1f}x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusedattend cpu-contention", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dtypes", type=_csv(str), default=["float32", "bfloat16"])
    ap.add_argument("--S", type=_csv(_positive), default=[1024, 4096])
    ap.add_argument("--B", type=_positive, default=1)
    ap.add_argument("--H-q", type=_positive, default=32)
    ap.add_argument("--H-kv", type=_positive, default=8)
    ap.add_argument("--D", type=_positive, default=128)
    ap.add_argument("--repeats", type=_positive, default=7)
    ap.add_argument("--load-cores", type=_positive, default=None, help="busy threads (default: our cores)")
    ap.add_argument("--load-seconds", type=float, default=300.0, help="the loader's own time bound")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if args.H_q % args.H_kv:
        ap.error(f"--H-q must be a multiple of --H-kv, got {args.H_q} and {args.H_kv}")
    unknown = [d for d in args.dtypes if d not in DTYPES]
    if unknown:
        ap.error(f"--dtypes: {', '.join(unknown)} not one of {', '.join(DTYPES)}")
    rows = measure(args.dtypes, args.S, args.B, args.H_q, args.H_kv, args.D, args.repeats,
                   load_cores=args.load_cores, load_seconds=args.load_seconds)
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
