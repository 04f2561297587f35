"""Whether two folders of kernel sources compile to the same machine code, without a GPU.

Compiles the decode kernels of a grid of configurations (plain f16 / bf16 and 4-bit, 8-bit and
2-bit K/V; D = 64 and 128; every mask kind; one block and split; f32 queries, plain and 4-bit:
both decode_mma.metal and decode_attention.metal, `configurations`) from metal/ and from OLD, as
mx.fast.cuda_kernel would for the H200 (ci/gpu/sass_stats.py's cuda_sass), and compares their
SASS instruction by instruction (addresses aside). A kernel edit whose SASS is unchanged for a
configuration cannot change what a test of that configuration computes on the H200, so a GPU
run of the sources before it still speaks for it there. Needs nvcc, cuobjdump and nvdisasm.

    mkdir old && git show HEAD~1:metal/decode_mma.metal > old/decode_mma.metal ...   # every file
    python ci/gpu/sass_same.py old
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlx.core as mx  # noqa: E402

from fusedattend import gpu, quantize_kv  # noqa: E402
from fusedattend._problem import plain_problem, quantized_problem  # noqa: E402
from sass_stats import cuda_sass  # noqa: E402


def masks(S, dtype):
    return (("none", None), ("causal", "causal"), ("bool", mx.ones((1, S), dtype=mx.bool_)),
            ("additive", mx.zeros((1, S), dtype=dtype)))


def configurations():
    """(label, problem, quantized) of the grid: H_q = 32, H_kv = 8, L = 1. f16 / bf16 queries take
    decode_mma.metal in one block (S = 300) and at S = 32768, and plain K/V decode_attention.metal
    in split blocks at S = 4096; f32 queries take decode_attention.metal always."""
    for S in (300, 4096, 32768):
        for dtype in (mx.bfloat16, mx.float16):
            for D in (64, 128):
                q = mx.zeros((1, 32, 1, D), dtype=dtype)
                k = mx.zeros((1, 8, S, D), dtype=dtype)
                for mask_name, mask in masks(S, dtype):
                    yield f"plain {dtype} D={D} S={S} mask={mask_name}", plain_problem(q, k, k, None, mask, None), False
            if S == 4096:
                continue  # the quantized kernel as at S = 32768
            q = mx.zeros((1, 32, 1, 128), dtype=dtype)
            k = mx.zeros((1, 8, S, 128), dtype=mx.float32)
            for bits, group_size in ((4, 64), (4, 32), (8, 64), (2, 32)):
                kq = quantize_kv(k, bits=bits, group_size=group_size)
                for mask_name, mask in masks(S, dtype):
                    yield (f"{bits}-bit gs={group_size} {dtype} S={S} mask={mask_name}",
                           quantized_problem(q, kq, kq, None, mask, None, bits, group_size), True)
    for S in (300, 4096):
        q = mx.zeros((1, 32, 1, 128), dtype=mx.float32)
        k = mx.zeros((1, 8, S, 128), dtype=mx.float32)
        kq = quantize_kv(k, bits=4, group_size=64)
        for mask_name, mask in masks(S, mx.float32):
            yield f"plain float32 D=128 S={S} mask={mask_name}", plain_problem(q, k, k, None, mask, None), False
            yield (f"4-bit gs=64 float32 S={S} mask={mask_name}",
                   quantized_problem(q, kq, kq, None, mask, None, 4, 64), True)


def listing(problem, quantized, folder):
    """(the launch's kernel name, its SASS lines without addresses) built from `folder`."""
    gpu.kernel_dir = lambda: Path(folder)
    launch = gpu.decode_launch(problem, quantized=quantized)
    _, sass = cuda_sass(launch)
    lines = [re.sub(r"/\*[0-9a-f]+\*/", "", line).strip() for line in sass.splitlines()
             if re.search(r"/\*[0-9a-f]{4,5}\*/", line)]
    return launch["name"], lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    old, new = sys.argv[1], gpu.kernel_dir()
    gpu.on_metal = lambda: False
    same = 0
    for label, problem, quantized in configurations():
        (_, before), (kernel, after) = listing(problem, quantized, old), listing(problem, quantized, new)
        if before == after:
            same += 1
        else:
            print(f"differs: {label}, {kernel} ({len(before)} -> {len(after)} instructions)", flush=True)
    print(f"identical SASS: {same} configurations")


if __name__ == "__main__":
    main()
