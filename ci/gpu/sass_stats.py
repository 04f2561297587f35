"""Instruction mix of the CUDA build of the decode kernel, without a GPU.

Compiles metal/decode_attention.metal as mx.fast.cuda_kernel would (tests/kernels/nvcc_wrap.py)
for one schedule and prints ptxas' register count, a histogram of SASS opcodes, and each loop's
(a branch back to an earlier address) instruction count and opcodes, longest first.
Needs nvcc, and cuobjdump + nvdisasm on PATH (pip wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm carry them).

    python ci/gpu/sass_stats.py --set KEY_BYTES_IN_FLIGHT=64 --H_kv 4 --quantized
"""

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mlx.core as mx  # noqa: E402

from fusedattend import gpu  # noqa: E402
from fusedattend import quantize_kv  # noqa: E402
from fusedattend._problem import plain_problem, quantized_problem  # noqa: E402
from tests.kernels import nvcc_wrap  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a schedule constant of fusedattend.gpu, e.g. SIMDGROUPS=8")
    p.add_argument("--D", type=int, default=128)
    p.add_argument("--H_kv", type=int, default=8, help="with H_q = 32: the GQA group size")
    p.add_argument("--S", type=int, default=64, help="keys: past gpu.SINGLE_PASS_MAX_S the split kernel")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--mask", default=None)
    p.add_argument("--quantized", action="store_true", help="4-bit K/V, group size 64")
    p.add_argument("--sass", metavar="FILE", help="also write the whole SASS listing there")
    args = p.parse_args()
    gpu.on_metal = lambda: False
    gpu.set_constants({name: int(value) for name, value in (item.split("=") for item in args.set)})
    q = mx.zeros((1, 32, 1, args.D), dtype=getattr(mx, args.dtype))
    k = mx.zeros((1, args.H_kv, args.S, args.D), dtype=q.dtype)
    if args.quantized:
        kq = quantize_kv(k, bits=4, group_size=64)
        problem = quantized_problem(q, kq, kq, None, args.mask, None, 4, 64)
    else:
        problem = plain_problem(q, k, k, None, args.mask, None)
    launch = gpu.decode_launch(problem, quantized=args.quantized)
    ptxas_log, sass = cuda_sass(launch)
    if args.sass:
        Path(args.sass).write_text(sass)
    print(launch["constants"])
    print("\n".join(l for l in ptxas_log.splitlines() if "registers" in l or "spill" in l))
    code = instructions(sass)
    ops = collections.Counter(op for _, op, _ in code)
    print(f"{len(code)} SASS instructions:", ", ".join(f"{k} {v}" for k, v in ops.most_common(20)))
    for start, end in loops(code):
        body = collections.Counter(op for at, op, _ in code if start <= at <= end)
        print(f"loop {start:#x}-{end:#x}: {sum(body.values())} instructions:",
              ", ".join(f"{k} {v}" for k, v in body.most_common(12)))


def cuda_sass(launch):
    """(ptxas' -v log, cuobjdump's SASS listing) of a gpu.decode_launch() as MLX would compile it
    for the H200 (sm_90), from the sources gpu.kernel_dir() holds now."""
    text = nvcc_wrap.wrap_launch(launch)
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(text)
        build = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                               capture_output=True, text=True, check=True)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return build.stderr, sass


def instructions(sass):
    """(address, opcode, branch target or None) of each SASS instruction, in order."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)[^;]*?(?:\s(0x[0-9a-f]+))?\s*;", line)
        if m:
            target = int(m.group(3), 16) if m.group(2) == "BRA" and m.group(3) else None
            out.append((int(m.group(1), 16), m.group(2), target))
    return out


def loops(code):
    """(first, last) address of each loop body: a branch back to an earlier address. A kernel's
    main loop is the longest; its count includes the rarely taken paths inside it (a rescale)."""
    return sorted(((target, at) for at, op, target in code if target is not None and target < at),
                  key=lambda r: r[1] - r[0], reverse=True)


if __name__ == "__main__":
    main()
