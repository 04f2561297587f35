"""Whether two folders of kernel sources compile to the same machine code, without a GPU.

Answers: can a kernel edit change what any test computes on the H200? It compiles the decode
kernels of a grid of launches (plain f16 / bf16 and 4-, 8- and 2-bit K/V; D = 64 and 128; every
mask kind; one block and split; f32 queries, plain and 4-bit: both decode_mma.metal and
decode_attention.metal; `configurations`) from metal/ and from OLD, under the shipped Policy, as
mx.fast.cuda_kernel would for sm_90 (tools/sass_stats.py's cuda_sass), and compares their SASS
instruction by instruction (addresses aside). An edit whose SASS is unchanged for a launch cannot
change its results there, so a GPU run of the sources before it still speaks for it. Needs nvcc,
cuobjdump and nvdisasm. From the repository root:

    mkdir -p /tmp/old && git archive HEAD~1 metal | tar -x -C /tmp/old --strip-components=1
    python tools/sass_same.py /tmp/old                  # every launch of the grid
    python tools/sass_same.py /tmp/old --only "4-bit gs=64 bfloat16 S=32768"   # labels holding it
"""

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlx.core as mx  # noqa: E402

from fusedattend import gpu, quantize_kv  # noqa: E402
from fusedattend._problem import plain_problem, quantized_problem  # noqa: E402
from fusedattend.gpu import sources  # noqa: E402
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
            name = str(dtype).rsplit(".", 1)[-1]
            for D in (64, 128):
                q = mx.zeros((1, 32, 1, D), dtype=dtype)
                k = mx.zeros((1, 8, S, D), dtype=dtype)
                for mask_name, mask in masks(S, dtype):
                    yield f"plain {name} D={D} S={S} mask={mask_name}", plain_problem(q, k, k, None, mask, None), False
            if S == 4096:
                continue  # the quantized kernel as at S = 32768
            q = mx.zeros((1, 32, 1, 128), dtype=dtype)
            k = mx.zeros((1, 8, S, 128), dtype=mx.float32)
            for bits, group_size in ((4, 64), (4, 32), (8, 64), (2, 32)):
                kq = quantize_kv(k, bits=bits, group_size=group_size)
                for mask_name, mask in masks(S, dtype):
                    yield (f"{bits}-bit gs={group_size} {name} S={S} mask={mask_name}",
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
    sources.kernel_dir = lambda: Path(folder)
    launch = gpu.decode_launch(problem, quantized=quantized)
    _, sass = cuda_sass(launch)
    lines = [re.sub(r"/\*[0-9a-f]+\*/", "", line).strip() for line in sass.splitlines()
             if re.search(r"/\*[0-9a-f]{4,5}\*/", line)]
    return launch["name"], lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old", help="a folder holding every file of metal/ as it was")
    p.add_argument("--only", metavar="TEXT", default="", help="only the launches whose label holds TEXT")
    args = p.parse_args()
    new = sources.kernel_dir()
    missing = [name for name in sources.KERNEL_FILES + sources.HEADER_FILES + (sources.CUDA_COMPAT,)
               if not (Path(args.old) / name).is_file()]
    if missing:
        sys.exit(f"{args.old} lacks {', '.join(missing)}")
    sources.on_metal = lambda: False
    same = differ = 0
    for label, problem, quantized in configurations():
        if args.only not in label:
            continue
        (_, before), (kernel, after) = listing(problem, quantized, args.old), listing(problem, quantized, new)
        if before == after:
            same += 1
        else:
            differ += 1
            print(f"differs: {label}, {kernel} ({len(before)} -> {len(after)} instructions)", flush=True)
    print(f"identical SASS: {same} launches, different: {differ}")
    if not same + differ:
        sys.exit(f"no launch's label holds {args.only!r}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
