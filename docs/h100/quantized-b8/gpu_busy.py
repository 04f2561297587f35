"""How long the GPU was busy in a profiled round: the union of its kernels' and copies' intervals.

torch.profiler's kernel sums (kernels.py's "kernels ... us") add up kernels that overlap, so in
the 32-layer model they exceed the round's wall time. This reads the traces' GPU events instead.

    python3 gpu_busy.py --keep OUT.json.gz TRACE.json ...   # keep the traces' GPU events only
    python3 gpu_busy.py call211/gpu-events.json.gz           # busy time, span and gaps of each
"""

import gzip
import json
import os
import sys

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_events(trace_path):
    """[start us, duration us, category, name] of each GPU event of a chrome trace."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    return [[e["ts"], e["dur"], e["cat"], e["name"][:80]] for e in events
            if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]


def busy(events, steps=8):
    intervals = sorted((ts, ts + dur) for ts, dur, *_ in events)
    total, gaps = 0.0, []
    start, end = intervals[0]
    for s, e in intervals[1:]:
        if s > end:
            total += end - start
            gaps.append(s - end)
            start, end = s, e
        else:
            end = max(end, e)
    total += end - start
    span = intervals[-1][1] - intervals[0][0]
    return (f"{len(events)} events, span {span / 1e3:.1f} ms, GPU busy {total / 1e3:.1f} ms ({100 * total / span:.0f}%,"
            f" {total / 1e3 / steps:.2f} ms a step), sum of events {sum(e[1] for e in events) / 1e3:.1f} ms, "
            f"gaps over 50 us {sum(g for g in gaps if g > 50) / 1e3:.1f} ms")


def main(argv):
    if argv[0] == "--keep":
        kept = {os.path.relpath(p): gpu_events(p) for p in argv[2:]}
        with gzip.open(argv[1], "wt") as f:
            json.dump(kept, f)
        return
    with gzip.open(argv[0], "rt") as f:
        for label, events in json.load(f).items():
            print(f"{label}: {busy(events)}")


if __name__ == "__main__":
    main(sys.argv[1:])
