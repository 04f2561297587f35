"""Where MLX's CUDA backend puts a custom kernel's outputs: time a fresh output's first writes.

    python3 ci/gpu/output_memory.py [MB]    # default 256; rows as JSON lines

MLX's CUDA allocator has two kinds of memory (mlx/backend/cuda/allocator.cpp): device memory
from a stream-ordered pool (cudaMallocAsync: what an op gets through cu::malloc_async) and
managed memory (cudaMallocManaged: allocator::malloc, arrays made from host data). Managed pages
written first by a kernel fault on the GPU, page by page, so a fresh managed output of MB
megabytes would take far longer to write than a device one (call 118, docs/h200/host-arrays/:
all within 1.5x, which does not settle it). Each row: a copy of MB megabytes of
float32 into a fresh output (mx.clear_cache() first, so no cached buffer is handed back) by
- "custom kernel": mx.fast.cuda_kernel, as fusedattend's kernels make their outputs;
- "custom kernel, init_value=0": the same, its output made by MLX's fill first;
- "MLX op (a + 0)": a built-in op;
and, for each, the same again with the buffer the previous round freed (no mx.clear_cache()).
Medians of ROUNDS rounds, µs, wall time from the call to mx.eval's return.
"""
import json
import statistics
import sys
import time

import mlx.core as mx

ROUNDS = 7
COPY = """
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a_shape[0]) o[i] = a[i];
"""


def main():
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    n = mb * (1 << 20) // 4
    a = mx.zeros((n,), dtype=mx.float32) + 1
    mx.eval(a)
    kernel = mx.fast.cuda_kernel(name="fa_probe_copy", input_names=["a"], output_names=["o"], source=COPY)

    def custom(**extra):
        return lambda: kernel(inputs=[a], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[a.shape],
                              output_dtypes=[mx.float32], **extra)[0]

    makers = {"custom kernel": custom(), "custom kernel, init_value=0": custom(init_value=0),
              "MLX op (a + 0)": lambda: a + 0}
    for name, make in makers.items():
        mx.eval(make())  # compiled, warm
        for fresh in (True, False):
            times = []
            for _ in range(ROUNDS):
                if fresh:
                    mx.clear_cache()
                else:
                    mx.eval(make())  # a buffer of this size freed into the cache
                t0 = time.perf_counter()
                mx.eval(make())
                times.append((time.perf_counter() - t0) * 1e6)
            print(json.dumps(dict(MB=mb, output=name, fresh_buffer=fresh, median_us=round(statistics.median(times), 1),
                                  rounds=[round(t, 1) for t in times])), flush=True)


if __name__ == "__main__":
    main()
