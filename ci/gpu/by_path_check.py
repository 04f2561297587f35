"""The CUDA kernels built from metal/'s paths give what the ones built from its text give, bit
for bit (gpu.CUDA_SOURCES_BY_PATH). Each form compiles in a process and a PTX cache of its own
(MLX caches a compiled kernel by name, and both forms carry the same name):

    MLX_PTX_CACHE_DIR=$(mktemp -d) python ci/gpu/by_path_check.py path
    MLX_PTX_CACHE_DIR=$(mktemp -d) python ci/gpu/by_path_check.py text   # compares with the first

Outputs go to $OUT/by_path_check_{path,text}.npz; the second run prints whether all are equal.
Problems: both decode bodies, one block and split blocks, plain and 4-bit K/V, f32 queries, masks.
"""
import os
import sys
import time

import mlx.core as mx
import numpy as np

import fusedattend as fa
from fusedattend import gpu

PROBLEMS = [  # S, dtype, quantized, mask
    (2048, mx.bfloat16, False, None), (300, mx.float16, False, "causal"), (4097, mx.bfloat16, True, "causal"),
    (700, mx.float32, False, None), (33000, mx.bfloat16, False, None), (9000, mx.float16, True, None),
    (600, mx.float32, True, None)]


def main(form):
    gpu.CUDA_SOURCES_BY_PATH = form == "path"
    out_dir = os.environ.get("OUT", ".")
    mx.random.seed(0)
    outs = {}
    for i, (S, dtype, quantized, mask) in enumerate(PROBLEMS):
        q = mx.random.normal((2, 32, 2, 128)).astype(dtype)
        k = mx.random.normal((2, 8, S, 128)).astype(dtype)
        v = mx.random.normal((2, 8, S, 128)).astype(dtype)
        t0 = time.time()
        if quantized:
            out = fa.quantized_decode_attention(q, fa.quantize_kv(k), fa.quantize_kv(v), mask=mask, backend="cuda")
        else:
            out = fa.decode_attention(q, k, v, mask=mask, backend="cuda")
        mx.eval(out)
        print(form, S, dtype, "q4" if quantized else "plain", mask, f"{time.time() - t0:.2f} s (compile and run)",
              flush=True)
        outs[f"problem{i}"] = np.array(out.astype(mx.float32))
    np.savez(os.path.join(out_dir, f"by_path_check_{form}.npz"), **outs)
    if form == "text":
        other = np.load(os.path.join(out_dir, "by_path_check_path.npz"))
        same = [np.array_equal(outs[key], other[key], equal_nan=True) for key in outs]
        print("by path vs text, bit-identical:", same, "ALL IDENTICAL" if all(same) else "SOME DIFFER")
        return 0 if all(same) else 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] not in (["path"], ["text"]):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
