"""python -m fusedattend tune: sweep the GPU schedule's free parameters on this chip, write its policy.

    python -m fusedattend tune                 # sweep, check, write fusedattend/gpu/policies/<chip>.json
    python -m fusedattend tune --dry-run       # what it would sweep and where it would write (any machine)
    python -m fusedattend tune --quick --out my-chip.json

The sweep is coordinate descent over TUNABLE (gpu/schedule.py's Policy fields that only choose
how the work is cut: the split block size, the one-launch threshold, simdgroups, the crossovers
between the two decode kernels, the window path's block), each over a fixed set of candidates,
starting from the policy in force. A candidate is kept where it times the workload (a grid of
B x S x format, each shape timed as `bench` times it) faster by more than --min-gain, as the
geometric mean of its per-shape ratios to the best policy so far, timed again beside it (clocks
drift over the sweep's minutes). Before writing, the chosen policy must pass a check on this GPU:
every request of a batch bit-identical to the request alone, and every output within the
oracle's parity tolerance, at S around the chosen block edges.

Tuning never changes what a policy may depend on: every field here is global (no field looks at
B or NL), and schedule.py derives block sizes from S and the format only, so batch invariance
holds under any policy in this space (tests/kernels/test_tuned_policies.py checks the space's
schedules and, in the CPU emulation, drawn policies of it). The file holds the swept fields and
notes ("_" keys: chip, MLX version, workload, speed-up); schedule.current_policy loads it on this
chip, and FUSEDATTEND_SCHEDULE (a file, or "default") overrides it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import sys
import tempfile
import time
from typing import Dict, Optional, Tuple

import mlx.core as mx

from fusedattend.gpu import schedule

# Field -> candidates. Every combination must be a valid Policy (load_policy) and a launch the
# kernels support: simdgroups of one block at most 8 (registers), block sizes powers of two.
TUNABLE: Dict[str, Tuple[int, ...]] = {
    "single_pass_max_s": (256, 512, 1024, 2048),
    "target_blocks": (16, 32, 64),
    "min_block": (128, 256, 512),
    "max_block": (512, 1024, 2048),
    "plain_mma_min_block": (256, 512, 1024, 2048),
    "plain_long_blocks_from_s": (513, 1025, 2049, 4097),
    "simdgroups": (2, 4, 8),
    "quantized_mma_simdgroups": (1, 2, 4),
    "plain_mma_simdgroups": (2, 4, 8),
    "single_pass_simdgroups": (2, 4, 8),
    "window_block": (256, 512, 1024),
}
# The workload's format for QuantizedWindowCache's decode (window_block's only user): S 4-bit keys
# (groups of 64), then a full-precision window of WINDOW_FORMAT_KEYS, as a cache of S + 128 holds.
WINDOW_FORMAT = "q4w"
WINDOW_FORMAT_KEYS = 128
GPU_BACKENDS = ("metal", "cuda")
NOTE_KEYS = ("_chip", "_mlx", "_device", "_date", "_workload", "_speedup", "_tuned_fields")


def valid(policy: schedule.Policy) -> bool:
    """Whether the schedule accepts `policy` (what load_policy checks across fields)."""
    return policy.min_block <= policy.max_block


def space_size() -> int:
    return math.prod(len(c) for c in TUNABLE.values())


@dataclasses.dataclass(frozen=True)
class Workload:
    B: Tuple[int, ...] = (1, 8, 32)
    S: Tuple[int, ...] = (512, 2048, 8192, 32768)
    formats: Tuple[str, ...] = ("bfloat16", "q4", WINDOW_FORMAT)
    H_q: int = 32
    H_kv: int = 8
    D: int = 128

    def shapes(self):
        return [(B, S, fmt) for fmt in self.formats for B in self.B for S in self.S]


QUICK = Workload(B=(1, 8), S=(1024, 8192), formats=("bfloat16", "q4", WINDOW_FORMAT))


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m fusedattend tune", description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=GPU_BACKENDS, default=None, help="the GPU backend (default: the one here)")
    p.add_argument("--out", default=None, help="the policy file to write (default: schedule.chip_policy_path())")
    p.add_argument("--fields", default=",".join(TUNABLE), help="comma list of the fields to sweep, in order")
    p.add_argument("--passes", type=int, default=2, help="coordinate-descent passes over the fields")
    p.add_argument("--min-gain", type=float, default=0.02, help="keep a candidate only this much faster (0.02: 2%%)")
    p.add_argument("--repeats", type=int, default=7, help="timing samples a shape (median)")
    p.add_argument("--inner", type=int, default=20, help="calls queued a sample")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop sweeping after this long and check and write the best policy so far")
    p.add_argument("--quick", action="store_true", help=f"a small workload ({len(QUICK.shapes())} shapes)")
    p.add_argument("--B", default=None, help="the workload's batch sizes (comma list; default: the workload's)")
    p.add_argument("--S", default=None, help="the workload's cache lengths (comma list)")
    p.add_argument("--formats", default=None, help="the workload's formats (comma list of bfloat16, float16, q4, q8, ...)")
    p.add_argument("--dry-run", action="store_true", help="print the sweep and the output path; time nothing")
    args = p.parse_args(argv)
    workload = QUICK if args.quick else Workload()
    try:
        for name, kind in (("B", int), ("S", int), ("formats", str)):
            text = getattr(args, name)
            if text is not None:
                values = tuple(kind(x) for x in text.split(",") if x)
                if not values or (kind is int and min(values) < 1):
                    raise ValueError(f"--{name}: needs positive values, got {text!r}")
                workload = dataclasses.replace(workload, **{name: values})
    except ValueError as e:
        p.error(str(e) if str(e).startswith("--") else f"--B and --S take comma lists of integers ({e})")
    formats = ("float32", "float16", "bfloat16", "q2", "q4", "q8", WINDOW_FORMAT)
    if not set(workload.formats) <= set(formats):
        p.error(f"--formats: choose from {', '.join(formats)}, got {','.join(workload.formats)}")
    args.workload = workload
    args.fields = [f for f in args.fields.split(",") if f]
    unknown = [f for f in args.fields if f not in TUNABLE]
    if unknown:
        p.error(f"--fields: not tunable: {', '.join(unknown)} (tunable: {', '.join(TUNABLE)})")
    if args.passes < 1 or args.repeats < 1 or args.inner < 1 or not 0 <= args.min_gain < 1:
        p.error("--passes, --repeats and --inner must be at least 1, --min-gain in [0, 1)")
    return args


@contextlib.contextmanager
def schedule_file(values: dict):
    """The policy of `values` (Policy fields) as the schedule's, for the block: a fresh JSON file
    that FUSEDATTEND_SCHEDULE names (a new path, so a new Policy, new Schedules and new replays:
    each is keyed by it). Blocks nest; a bad field fails on entry, naming it. Yields the policy."""
    fd, path = tempfile.mkstemp(prefix="fusedattend-schedule-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    saved = os.environ.get(schedule.SCHEDULE_ENV)
    os.environ[schedule.SCHEDULE_ENV] = path
    try:
        yield schedule.current_policy()
    finally:
        if saved is None:
            os.environ.pop(schedule.SCHEDULE_ENV, None)
        else:
            os.environ[schedule.SCHEDULE_ENV] = saved
        os.unlink(path)


@contextlib.contextmanager
def policy_in_force(policy: schedule.Policy):
    """`policy` as the schedule's, for the block (schedule_file)."""
    with schedule_file(dataclasses.asdict(policy)) as loaded:
        assert loaded == policy
        yield policy


def _window_case(B, S, workload, seed=0):
    """WINDOW_FORMAT's case: bf16 queries, S keys 4-bit, then WINDOW_FORMAT_KEYS full-precision."""
    import fusedattend as fa

    mx.random.seed(seed)
    H_kv, D = workload.H_kv, workload.D
    kq, vq = (fa.quantize_kv(mx.random.normal((B, H_kv, S, D)).astype(mx.bfloat16)) for _ in range(2))
    kw, vw = (mx.random.normal((B, H_kv, WINDOW_FORMAT_KEYS, D)).astype(mx.bfloat16) for _ in range(2))
    q = mx.random.normal((B, workload.H_q, 1, D)).astype(mx.bfloat16)
    mx.eval(q, kq, vq, kw, vw)
    return {"q": q, "kq": kq, "vq": vq, "kw": kw, "vw": vw, "scale": D**-0.5}


def _call(case, backend):
    import fusedattend as fa

    if "kw" in case:
        return lambda: fa.windowed_decode_attention(case["q"], case["kq"], case["vq"], case["kw"], case["vw"],
                                                    scale=case["scale"], backend=backend)
    if case.get("bits"):
        return lambda: fa.quantized_decode_attention(case["q"], case["kq"], case["vq"], bits=case["bits"],
                                                     group_size=case["group_size"], scale=case["scale"],
                                                     backend=backend)
    return lambda: fa.decode_attention(case["q"], case["k"], case["v"], scale=case["scale"], backend=backend)


def time_policy(policy, calls, repeats, inner) -> Dict[tuple, float]:
    """Median seconds a call of each shape under `policy`."""
    from fusedattend.benchmarks.harness import time_call

    with policy_in_force(policy):
        return {shape: sorted(time_call(fn, repeats=repeats, inner=inner, warmup=2))[repeats // 2]
                for shape, fn in calls.items()}


def score(times, base) -> float:
    """Geometric mean of time / base time over the shapes (below 1: faster)."""
    return math.exp(sum(math.log(times[s] / base[s]) for s in base) / len(base))


def sweep(start, fields, calls, *, passes, min_gain, repeats, inner, budget=None, log=print):
    """(best policy, its score against `start`): coordinate descent over `fields`' candidates,
    for at most `budget` seconds (then the best so far)."""
    began = time.monotonic()
    time_policy(start, calls, repeats, inner)  # warms the GPU up and builds the starting kernels
    best, best_score = start, 1.0
    for n in range(passes):
        moved = False
        for field in fields:
            for value in TUNABLE[field]:
                if budget is not None and time.monotonic() - began > budget:
                    log(f"  budget of {budget:.0f} s spent: the best policy so far")
                    return best, best_score
                candidate = dataclasses.replace(best, **{field: value})
                if value == getattr(best, field) or not valid(candidate):
                    continue
                # against the best timed again beside it: clocks drift over a sweep's minutes
                ratio = score(time_policy(candidate, calls, repeats, inner), time_policy(best, calls, repeats, inner))
                kept = ratio < 1 - min_gain
                log(f"  pass {n + 1}  {field:28s} {value:6d}  {ratio:.3f} x the best so far{'  kept' if kept else ''}")
                if kept:
                    best, best_score, moved = candidate, best_score * ratio, True
        if not moved:
            break
    return best, best_score


def check_policy(policy, backend, formats=("bfloat16", "q4"), log=print) -> bool:
    """On this GPU under `policy`: each request of a batch bit-identical to it alone, and the
    outputs within the oracle's parity tolerance, at S around the policy's block edges, in each
    of `formats` (float dtypes, or qN: N-bit codes, bf16 queries)."""
    import numpy as np

    import fusedattend as fa
    from fusedattend.conformance import oracle

    block = schedule.block_keys(4 * policy.max_block, policy=policy)
    lengths = sorted({1, policy.single_pass_max_s, policy.single_pass_max_s + 1, policy.min_block + 3,
                      3 * block + 5, policy.plain_long_blocks_from_s, 2 * policy.max_block + 5})
    ok = True
    with policy_in_force(policy):
        for fmt in formats:
            if fmt == WINDOW_FORMAT:
                for S in sorted({1, policy.window_block - 1, policy.window_block + 3, 3 * policy.window_block + 5}):
                    ok = _check_window(S, backend, log) and ok
                continue
            dtype = {"float32": mx.float32, "float16": mx.float16}.get(fmt, mx.bfloat16)
            bits = int(fmt[1:]) if fmt.startswith("q") else None
            for S in lengths:
                mx.random.seed(S)
                q = mx.random.normal((3, 8, 1, 128)).astype(dtype)
                k, v = (mx.random.normal((3, 2, S, 128)).astype(dtype) for _ in range(2))
                if bits:
                    kq, vq = fa.quantize_kv(k, bits=bits, group_size=64), fa.quantize_kv(v, bits=bits, group_size=64)
                    attend = lambda b: fa.quantized_decode_attention(  # noqa: E731
                        q[b], tuple(x[b] for x in kq), tuple(x[b] for x in vq), bits=bits, group_size=64,
                        backend=backend)
                    k64, v64 = (_oracle_dequantized(t, bits) for t in (kq, vq))
                else:
                    attend = lambda b: fa.decode_attention(q[b], k[b], v[b], backend=backend)  # noqa: E731
                    k64, v64 = (np.array(x.astype(mx.float32)) for x in (k, v))
                whole = attend(slice(None))
                alone = all(mx.array_equal(whole[i:i + 1], attend(slice(i, i + 1))).item() for i in range(3))
                expected, stats = oracle.attention(np.array(q.astype(mx.float32)), k64, v64, stats=True)
                ratio, _ = oracle.compare(np.array(whole.astype(mx.float32)), expected,
                                          oracle.parity_tolerance(expected, stats, str(dtype).split(".")[-1], 128))
                log(f"  check {fmt:8s} S={S:6d}: batch == requests alone: {alone}, err/tol {ratio:.2f}")
                ok = ok and alone and ratio <= 1.0
    return ok


def _oracle_dequantized(triple, bits):
    """A (codes, scales, biases) triple (groups of 64) dequantized by the oracle, the codes read
    as uint32 (float32 would round them)."""
    import numpy as np

    from fusedattend.conformance import oracle

    codes, scales, biases = triple
    return oracle.dequantize(np.array(codes), np.array(scales.astype(mx.float32)), np.array(biases.astype(mx.float32)),
                             bits=bits, group_size=64)


def _check_window(S, backend, log) -> bool:
    """check_policy for WINDOW_FORMAT at S quantized keys: three requests of their own lengths
    (S, S - 1 and none quantized; 128, 127 and 1 in the window), each bit-identical to it alone
    over buffers of its own length, and the outputs within the oracle's tolerance."""
    import numpy as np

    import fusedattend as fa
    from fusedattend.conformance import oracle

    case = _window_case(3, S, Workload(H_q=8, H_kv=2), seed=S)
    q, kq, vq, kw, vw = (case[name] for name in ("q", "kq", "vq", "kw", "vw"))
    q_lens, w_lens = [S, max(S - 1, 0), 0], [WINDOW_FORMAT_KEYS, WINDOW_FORMAT_KEYS - 1, 1]

    def attend(b, quantized, window):
        return fa.windowed_decode_attention(q[b], [x[b] for x in quantized[0]], [x[b] for x in quantized[1]],
                                            window[0][b], window[1][b], key_ranges=quantized[2],
                                            window_ranges=window[2], backend=backend)

    whole = attend(slice(None), (kq, vq, fa.KeyRanges([(0, n) for n in q_lens])),
                   (kw, vw, fa.KeyRanges([(0, n) for n in w_lens])))
    alone, ratio = True, 0.0
    for i, (n, w) in enumerate(zip(q_lens, w_lens)):
        b = slice(i, i + 1)
        if n:
            own = attend(b, ([x[..., :n, :] for x in kq], [x[..., :n, :] for x in vq], None),
                         (kw[..., :w, :], vw[..., :w, :], None))
        else:
            own = fa.windowed_decode_attention(q[b], None, None, kw[b, :, :w], vw[b, :, :w], backend=backend)
        alone = alone and mx.array_equal(whole[b], own).item()
        k64, v64 = (np.concatenate([_oracle_dequantized([x[b] for x in t], 4)[:, :, :n],
                                    np.array(full[b, :, :w].astype(mx.float32))], axis=2)
                    for t, full in ((kq, kw), (vq, vw)))
        expected, stats = oracle.attention(np.array(q[b].astype(mx.float32)), k64, v64, stats=True)
        r, _ = oracle.compare(np.array(whole[b].astype(mx.float32)), expected,
                              oracle.parity_tolerance(expected, stats, "bfloat16", 128))
        ratio = max(ratio, r)
    log(f"  check {WINDOW_FORMAT:8s} S={S:6d}: batch == requests alone: {alone}, err/tol {ratio:.2f}")
    return alone and ratio <= 1.0


def _gpu_backend(wanted: Optional[str]) -> Optional[str]:
    import fusedattend as fa

    here = [b for b in GPU_BACKENDS if b in fa.available_backends()]
    if wanted:
        return wanted if wanted in here else None
    return here[0] if here else None


def _notes(chip, backend, workload, speedup, fields):
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    return {"_chip": chip, "_mlx": mx.__version__, "_device": str(info.get("device_name", backend)),
            "_date": datetime.date.today().isoformat(), "_workload": dataclasses.asdict(workload),
            "_speedup": round(1 / speedup, 3), "_tuned_fields": list(fields)}


def main(argv=None):
    from fusedattend.chip import chip_id

    args = _parse(sys.argv[1:] if argv is None else argv)
    workload = args.workload
    chip = chip_id()
    out = args.out or str(schedule.chip_policy_path(chip))
    backend = _gpu_backend(args.backend)
    timings = 2 * sum(len(TUNABLE[f]) - 1 for f in args.fields) * args.passes + 1
    plan = (f"chip {chip}; fields {', '.join(args.fields)}; up to {timings} timings of {len(workload.shapes())} "
            f"shapes ({args.repeats} samples of {args.inner} calls); writes {out}")
    if args.dry_run:
        print("tune (dry run): " + plan)
        for field in args.fields:
            print(f"  {field:28s} {TUNABLE[field]}  (now {getattr(schedule.current_policy(), field)})")
        return 0
    if backend is None:
        wanted = f"--backend {args.backend}" if args.backend else "a GPU backend (metal or cuda)"
        print(f"python -m fusedattend tune: needs {wanted}, and this machine has none: the schedule's "
              "parameters only matter to the Metal and CUDA kernels. `--dry-run` prints the sweep.", file=sys.stderr)
        return 2
    from fusedattend.benchmarks.harness import make_case

    print("tune: " + plan + f"; backend {backend}", flush=True)
    calls = {}
    for B, S, fmt in workload.shapes():
        if fmt == WINDOW_FORMAT:
            case = _window_case(B, S, workload)
        else:
            case = make_case(B, S, fmt, H_q=workload.H_q, H_kv=workload.H_kv, D=workload.D)
        calls[(B, S, fmt)] = _call(case, backend)
    start = schedule.current_policy()
    best, best_score = sweep(start, args.fields, calls, passes=args.passes, min_gain=args.min_gain,
                             repeats=args.repeats, inner=args.inner, budget=args.budget)
    if not check_policy(best, backend, workload.formats):
        print("tune: the chosen policy failed its check on this GPU (above); nothing written", file=sys.stderr)
        return 1
    values = {field: getattr(best, field) for field in TUNABLE}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({**_notes(chip, backend, workload, best_score, args.fields), **values}, f, indent=1)
        f.write("\n")
    changed = {k: v for k, v in values.items() if v != getattr(start, k)}
    print(f"tune: {1 / best_score:.3f}x the starting policy over the workload; changed {changed or 'nothing'}; "
          f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
