"""Does an 8-byte kernel input cost our decode kernel time? MLX's CUDA allocator puts arrays of at
most 8 bytes in a small pool of managed memory advised read-mostly (mlx/backend/cuda/allocator.cpp).
Our kernels' `scalars` input (softmax scale, 1.0: two float32) was 8 bytes until 6245b13, which
pads it to gpu.CONSTANT_INPUT_MIN_BYTES; on the H200 the padded form was 15-28% faster at small
grids (docs/h200/scalar-pool/).

    python3 ci/gpu/scalar_pool.py [B S]   # default 1 2048; prints the decode kernel's median µs
    python3 ci/gpu/scalar_pool.py key_ranges [S]   # B = 1: the kernel with and without key_ranges

For each way of passing `scalars` (8 bytes, as before 6245b13; padded, as gpu._float32s makes it)
and each kind of step (the call alone; the call, then a 4-byte array made from Python, a host
write into the pool), runs 40 evaluated steps under torch.profiler and reads the decode kernel's
duration from the CUPTI trace; then checks that both forms give the same bits.
"""
import json
import os
import statistics
import sys

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu

sys.path.insert(0, os.path.dirname(__file__))
from kernel_gaps import profiled_kernels  # noqa: E402
from schedule_sweep import decode_inputs  # noqa: E402


def kernel_us(step, steps=40):
    """CUPTI durations over `steps` calls of step(i), after 5 unprofiled ones: the decode kernel's
    each, and every kernel's (ours, MLX's) summed a step."""
    for i in range(5):
        step(i)
    kernels = profiled_kernels(lambda: [step(i) for i in range(steps)])
    return [dur for name, _, dur in kernels if "fa_decode" in name], sum(dur for _, _, dur in kernels) / steps


def timed_row(step, **fields):
    """kernel_us(step) as a printed row: `fields`, the decode kernel's median and max µs and count,
    and every kernel's µs a step."""
    decode, step_total = kernel_us(step)
    row = dict(fields, decode_us_median=round(statistics.median(decode), 2), decode_us_max=round(max(decode), 2),
               kernels=len(decode), all_kernels_us_a_step=round(step_total, 2))
    print(json.dumps(row), flush=True)
    return row


def scalars_rows(B, S):
    """The decode kernel with `scalars` of 8 bytes (as before 6245b13) and padded (gpu._float32s),
    each step alone and followed by a host write into the small pool; then whether both forms gave
    the same bits."""
    q, k, v = decode_inputs(B, S)
    shipped = gpu._float32s
    rows, outs = [], {}
    for padded in (False, True):
        gpu._float32s = shipped if padded else (lambda *xs: mx.array(xs, dtype=mx.float32))
        gpu.clear_caches()
        for host_scalar in (False, True):
            def step(i):
                outs[padded, host_scalar] = fa.decode_attention(q, k, v, backend="cuda")
                mx.eval(outs[padded, host_scalar])
                if host_scalar:
                    mx.eval(mx.array(float(i)))  # 4 bytes: the small pool, written by the host
            rows.append(timed_row(step, B=B, S=S, scalars_bytes=gpu._float32s(1.0, 1.0).nbytes,
                                  host_scalar_each_step=host_scalar))
    gpu._float32s = shipped
    gpu.clear_caches()
    same = all(mx.array_equal(outs[True, h], outs[False, h]).item() for h in (False, True))
    print(json.dumps(dict(outputs_bit_identical=same)), flush=True)
    return rows


KEY_RANGES_FORMS = {
    "none": lambda S: None,
    # (1, 2) int32 from Python: 8 bytes, in the pool, written by the host
    "8 bytes": lambda S: mx.array([[0, S]], dtype=mx.int32),
    # the same values copied on the GPU into a 16-byte array, passed as a view of its first row
    "view of a 16-byte copy": lambda S: mx.concatenate(
        [mx.array([[0, S]], dtype=mx.int32), mx.zeros((1, 2), dtype=mx.int32)])[:1],
}


def key_ranges_rows(S):
    """A caller's key_ranges at B = 1 is (1, 2) int32, 8 bytes: the same small pool. Made from
    Python each step, as a decode loop would, it is written by the host every step. (Until
    8ad17c7 the package's value check, _problem._key_ranges, also read it on the GPU before the
    kernel did; calls 95 and 96 ran that form.) Is the kernel slower with it than without (all
    keys, so the outputs must be equal), and does a copy out of the pool, one more launch, pay
    for itself?"""
    q, k, v = decode_inputs(1, S)
    rows, outs = [], {}
    for form, make in KEY_RANGES_FORMS.items():
        def step(i):
            outs[form] = fa.decode_attention(q, k, v, key_ranges=make(S), backend="cuda")
            mx.eval(outs[form])
            mx.eval(mx.array(float(i)))  # 4 bytes: the small pool, written by the host
        rows.append(timed_row(step, B=1, S=S, key_ranges=form))
    rows.append(dict(outputs_bit_identical=all(mx.array_equal(outs["none"], o).item() for o in outs.values())))
    print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    if sys.argv[1:2] == ["key_ranges"]:
        S = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
        rows, name = key_ranges_rows(S), f"key_ranges_pool_1_{S}.json"
    else:
        B, S = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (1, 2048)
        rows, name = scalars_rows(B, S), f"scalar_pool_{B}_{S}.json"
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
