"""Where a key_ranges call's host time goes, piece by piece, in a decode loop on MLX's CUDA backend.

    python3 ci/gpu/key_ranges_pieces.py [S] [backend]   # default 2048 cuda; rows as JSON lines

Call 101 (docs/h200/key-ranges-host/) found the host check (then numpy, `_problem._key_ranges`)
18-40 µs a call dearer than no check inside an 8-layer step, where `ci/key_ranges_check.py` times
the same lines at 7-11 µs alone. Here each step makes its (B, 2) int32 ranges from Python and
passes them to LAYERS calls in a row, evaluated once at the step's end as a model's step is. Each
layer times, with the host's clock: the shipped host check (`key_ranges_outside_on_host`; the
step's first layer apart, the first read of a fresh array), a numpy read of the array, the check
in numpy form (KEY_RANGES_AS_INTS_MAX_B = 0), the kernels' form of the array
(`kernel_key_ranges`), the whole replayed call, and the same call without key_ranges. A second
loop evaluates each layer before the next (the GPU idle while the host reads). Medians over
STEPS steps, µs.
"""
import json
import os
import statistics
import sys
import time

import mlx.core as mx
import numpy as np

import fusedattend as fa
from fusedattend import _problem

sys.path.insert(0, os.path.dirname(__file__))
from schedule_sweep import decode_inputs  # noqa: E402

STEPS, LAYERS = 40, 8
AS_INTS_MAX_B = _problem.KEY_RANGES_AS_INTS_MAX_B


def _us(t0):
    return (time.perf_counter_ns() - t0) / 1e3


def pieces(q, k, v, S, backend, idle):
    """Per-piece medians of one loop (the GPU busy with the step's earlier layers unless idle)."""
    B = q.shape[0]
    times = {}
    for step in range(STEPS + 3):
        key_ranges = mx.array([[0, S]] * B, dtype=mx.int32)
        outs = []
        for layer in range(LAYERS):
            got = {}
            t0 = time.perf_counter_ns()
            assert not _problem.key_ranges_outside_on_host(key_ranges, S)
            got["host check (shipped), " + ("layer 1" if layer == 0 else "layers 2+")] = _us(t0)
            t0 = time.perf_counter_ns()
            np.asarray(key_ranges)
            got["numpy read"] = _us(t0)
            _problem.KEY_RANGES_AS_INTS_MAX_B = 0
            t0 = time.perf_counter_ns()
            assert not _problem.key_ranges_outside_on_host(key_ranges, S)
            got["host check, numpy form"] = _us(t0)
            _problem.KEY_RANGES_AS_INTS_MAX_B = AS_INTS_MAX_B
            t0 = time.perf_counter_ns()
            _problem.kernel_key_ranges(key_ranges)
            got["kernel form"] = _us(t0)
            t0 = time.perf_counter_ns()
            outs.append(fa.decode_attention(q, k, v, key_ranges=key_ranges, backend=backend))
            got["whole call"] = _us(t0)
            t0 = time.perf_counter_ns()
            outs.append(fa.decode_attention(q, k, v, backend=backend))
            got["whole call, no key_ranges"] = _us(t0)
            if step >= 3:
                for name, us in got.items():
                    times.setdefault(name, []).append(us)
            if idle:
                mx.eval(outs)
        mx.eval(outs)
    return {name: round(statistics.median(us), 2) for name, us in times.items()}


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    backend = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    for B in (1, 8, 32):
        q, k, v = decode_inputs(B, S)
        for idle in (False, True):
            row = dict(B=B, S=S, layers=LAYERS, gpu="idle while the host reads" if idle else "busy", backend=backend)
            row.update(pieces(q, k, v, S, backend, idle))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
