"""Where a queued sample's time goes on the GPU: its kernels, and the idle time between them.

The benchmark's samples queue `inner` calls and evaluate them once (fusedattend.bench.time_call);
at some shapes a sample takes more than its kernels (docs/h200/journal.md, "What bounds it": 5-25 us a
call at 4-bit B = 8, S = 8192). This runs such samples under torch.profiler, whose CUPTI
tracing records every kernel of the process, MLX's included, and reads the trace: per sample
the wall time, the time its calls took to build (before mx.eval), the time from the sample's
start to its first kernel, the kernels' busy time, and the gaps between consecutive kernels
(all per call). --impl times a peer the same way (mx.fast.sdpa, mlx_lm.qsdpa). --chain feeds
each call's output to the next as its query (`fusedattend bench --chain`): the calls then run one
after the other, as a model's layers do, and busy + gaps a call is the GPU's time for one layer's
attention where the host's work overlaps it (a decode loop on mx.async_eval).

    python3 ci/gpu/kernel_gaps.py B S [--fmt q4|bfloat16] [--impl cuda] [--inner 20] [--samples 5] [--cold-mb 200] [--chain]
        [--set '{"PLAIN_PREFETCH_TILES": 0}']   # fusedattend.gpu constants, as schedule_sweep.py's variants
    # writes $OUT/gaps_<impl>_<fmt>_<B>_<S>[_chain][_NAME-VALUE...].json (the summary and the kernels of each sample) if OUT is set
"""
import argparse
import json
import os
import tempfile


def sample_summary(sample, kernels, inner, build_end=None):
    """`sample`: (start, end) of one sample's CPU range in us; `kernels`: (name, start, dur) of
    the GPU kernels in the same clock; `build_end`: when its calls were built (mx.eval began).
    Per call: wall, build (the calls' graph), lead (sample start to first kernel), busy (the
    kernels' union), gaps (idle time between the first kernel's start and the last one's end),
    tail (last kernel's end to the sample's end), and the largest gap, with the kernels that
    started inside the range."""
    t0, t1 = sample
    mine = sorted((k for k in kernels if t0 <= k[1] < t1), key=lambda k: k[1])
    built = {} if build_end is None else {"build_us": (build_end - t0) / inner}
    if not mine:
        return {"wall_us": (t1 - t0) / inner, **built, "kernels": 0}
    busy = gaps = largest = 0.0
    reach = mine[0][1]
    for _, start, dur in mine:
        if start > reach:
            gaps += start - reach
            largest = max(largest, start - reach)
        busy += max(0.0, start + dur - max(start, reach))
        reach = max(reach, start + dur)
    return {"wall_us": (t1 - t0) / inner, **built, "lead_us": (mine[0][1] - t0) / inner, "busy_us": busy / inner,
            "gaps_us": gaps / inner, "largest_gap_us": largest, "tail_us": (t1 - reach) / inner,
            "kernels": len(mine)}


def trace_events(path, names=("sample", "build")):
    """(ranges, kernels) from a chrome trace torch.profiler exported: for each of `names` the
    CPU ranges so called, and the GPU kernels; (start, end) and (name, start, dur) in us."""
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    ranges = {name: sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                           if e.get("name") == name and e.get("cat") == "user_annotation") for name in names}
    kernels = [(e["name"], e["ts"], e["dur"]) for e in events if e.get("cat") == "kernel"]
    return ranges, kernels


def profiled_events(prof, names=("sample", "build")):
    """trace_events of a finished torch.profiler run, through a chrome trace in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        return trace_events(os.path.join(tmp, "trace.json"), names)


def profiled_kernels(run):
    """The GPU kernels (name, start, dur in us) that run() launched, from torch.profiler's CUPTI trace."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    return profiled_events(prof, ())[1]


def main():

    import mlx.core as mx
    from torch.profiler import ProfilerActivity, profile, record_function

    from fusedattend.bench import cold_cases, in_turn

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("B", type=int)
    p.add_argument("S", type=int)
    p.add_argument("--fmt", default="q4")
    p.add_argument("--inner", type=int, default=20)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--cold-mb", type=int, default=200)
    p.add_argument("--impl", default="cuda", help="a name of fusedattend.bench.implementations: cuda, "
                   "mx.fast.sdpa, mlx_lm.qsdpa, ...")
    p.add_argument("--chain", action="store_true", help="each call's query the previous call's output")
    p.add_argument("--set", default="{}", help="fusedattend.gpu constants to set, as JSON")
    args = p.parse_args()
    from fusedattend import gpu

    constants = json.loads(args.set)
    gpu.set_constants(constants)
    call = in_turn(cold_cases(args.B, args.S, args.fmt, args.cold_mb << 20), ["cuda"], args.chain)[args.impl]
    for _ in range(3):
        mx.eval([call() for _ in range(args.inner)])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.samples):
            with record_function("sample"):
                with record_function("build"):
                    outs = [call() for _ in range(args.inner)]
                mx.eval(outs)
    ranges, kernels = profiled_events(prof)
    rows = [sample_summary(s, kernels, args.inner, b[1]) for s, b in zip(ranges["sample"], ranges["build"])]
    for row in rows:
        print(json.dumps({k: round(v, 2) for k, v in row.items()}))
    names = sorted({name for name, _, _ in kernels})
    print(f"{len(kernels)} kernels traced: {', '.join(n[:60] for n in names)}")
    if os.environ.get("OUT"):
        tag = ("_chain" if args.chain else "") + "".join(f"_{name}-{value}" for name, value in constants.items())
        path = os.path.join(os.environ["OUT"], f"gaps_{args.impl}_{args.fmt}_{args.B}_{args.S}{tag}.json")
        json.dump({"args": vars(args), "samples": rows, "kernels": kernels}, open(path, "w"))


if __name__ == "__main__":
    main()
