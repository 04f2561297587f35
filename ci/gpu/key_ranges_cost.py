"""What a call's key_ranges costs a decode step on MLX's CUDA backend, by where the array was made
and how its values are checked.

    python3 ci/gpu/key_ranges_cost.py [S]   # default 2048; B = 1, 8, 32; rows as JSON lines

MLX's CUDA arrays live in managed memory (mlx/backend/cuda/allocator.cpp): arrays of at most 8
bytes in a small pool advised read-mostly, every larger one in an allocation of its own. Reading
a GPU-written array on the host (numpy, as `_problem._key_ranges` does since 8ad17c7) may move its
pages to the host, and the kernel that reads it next moves them back. On the H200 (call 97,
docs/h200/key-ranges-host/) a key_ranges made on the GPU and read by numpy doubled the decode
kernel's median time. This probe times each way of checking (the package's own first) against
each way of making the array, at B = 1 (8 bytes: the pool) and larger B (not the pool):
the decode kernel's and all kernels' CUPTI time a step, and a step's wall time.
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
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from kernel_gaps import profiled_kernels  # noqa: E402
from key_ranges_check import check_as_mlx_ops  # noqa: E402
from schedule_sweep import decode_inputs  # noqa: E402

STEPS = 40


def made_from_python(B, S, base):
    return mx.array([[0, S]] * B, dtype=mx.int32)


def made_on_the_gpu(B, S, base):
    # an MLX op's output, as when a decode loop keeps its ranges as an array and steps them there
    return mx.minimum(base, S)


FORMS = {"from Python": made_from_python, "made on the GPU": made_on_the_gpu}


def numpy_of_a_gpu_copy(key_ranges, B, S):
    """The shipped check, reading a copy the GPU makes (int64, so never the pool) instead of the
    caller's array."""
    copy = key_ranges.astype(mx.int64)
    ranges = np.asarray(copy)
    start, length = ranges[:, 0], ranges[:, 1]
    if np.any((start < 0) | (length < 0) | (start > S) | (length > S - start)):
        raise ValueError("key_ranges")
    return key_ranges.astype(mx.int32)


def _outside(ranges, S):
    start, length = ranges[:, 0], ranges[:, 1]
    return mx.any((start < 0) | (length < 0) | (start > S) | (length > S - start))


_outside_compiled = mx.compile(_outside)


def mlx_ops_compiled(key_ranges, B, S):
    """The MLX-op check fused by mx.compile (S a constant it compiles for), one bool read back."""
    if _outside_compiled(key_ranges.astype(mx.int64), S).item():
        raise ValueError("key_ranges")
    return key_ranges.astype(mx.int32)


CHECKS = {
    "numpy (shipped)": _problem._key_ranges,
    "MLX ops (until 8ad17c7)": check_as_mlx_ops,
    "MLX ops, compiled": mlx_ops_compiled,
    "numpy of a GPU copy": numpy_of_a_gpu_copy,
    "none": lambda key_ranges, B, S: key_ranges,
}


def rows(S):
    shipped = _problem._key_ranges
    out = []
    for B in (1, 8, 32):
        q, k, v = decode_inputs(B, S)
        base = mx.array([[0, S]] * B, dtype=mx.int32)
        mx.eval(base)
        for form, make in FORMS.items():
            outputs = {}
            for check_name, check in CHECKS.items():
                _problem._key_ranges = check

                def step(i):
                    key_ranges = make(B, S, base)
                    outputs[check_name] = fa.decode_attention(q, k, v, key_ranges=key_ranges, backend="cuda")
                    mx.eval(outputs[check_name])

                for i in range(5):
                    step(i)
                kernels = profiled_kernels(lambda: [step(i) for i in range(STEPS)])
                t0 = time.perf_counter()
                for i in range(STEPS):
                    step(i)
                wall = (time.perf_counter() - t0) / STEPS * 1e6
                decode = [dur for name, _, dur in kernels if "fa_decode" in name]
                row = dict(B=B, S=S, key_ranges=form, check=check_name, step_wall_us=round(wall, 2),
                           decode_us_median=round(statistics.median(decode), 2), decode_us_max=round(max(decode), 2),
                           all_kernels_us_a_step=round(sum(d for _, _, d in kernels) / STEPS, 2),
                           kernels_a_step=round(len(kernels) / STEPS, 2))
                print(json.dumps(row), flush=True)
                out.append(row)
            same = all(mx.array_equal(outputs["none"], o).item() for o in outputs.values())
            out.append(dict(B=B, S=S, key_ranges=form, outputs_bit_identical=same))
            print(json.dumps(out[-1]), flush=True)
    _problem._key_ranges = shipped
    return out


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    result = rows(S)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"key_ranges_cost_{S}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
