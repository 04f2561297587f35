"""Instruction mix of the CUDA build of the decode kernel, without a GPU.

Compiles metal/decode_attention.metal as mx.fast.cuda_kernel would (tests/kernels/nvcc_wrap.py)
for one schedule and prints ptxas' register count and a histogram of SASS opcodes.
Needs nvcc, and cuobjdump + nvdisasm on PATH (pip wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm carry them).

    python ci/gpu/sass_stats.py --E 8 --U 1 --NSG 8
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
from fusedattend._problem import plain_problem  # noqa: E402
from tests.kernels import nvcc_wrap  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--E", type=int, default=gpu.ELEMENTS_PER_LANE)
    p.add_argument("--U", type=int, default=gpu.KEYS_IN_FLIGHT)
    p.add_argument("--NSG", type=int, default=gpu.SIMDGROUPS)
    p.add_argument("--D", type=int, default=128)
    args = p.parse_args()
    gpu.on_metal = lambda: False
    gpu.ELEMENTS_PER_LANE, gpu.KEYS_IN_FLIGHT, gpu.SIMDGROUPS = args.E, args.U, args.NSG
    q = mx.zeros((1, 32, 1, args.D), dtype=mx.bfloat16)
    k = mx.zeros((1, 8, 64, args.D), dtype=mx.bfloat16)
    launch = gpu.decode_launch(plain_problem(q, k, k, None, None, None), quantized=False)
    source, header = gpu.kernel_sources("decode_attention.metal", launch["defines"])
    call = launch["call"]
    text = nvcc_wrap.wrap("fa_decode", source, header,
                          [(n, x.dtype) for n, x in zip(launch["input_names"], call["inputs"])],
                          list(zip(launch["output_names"], call["output_dtypes"])), call["template"])
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(text)
        build = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                               capture_output=True, text=True, check=True)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    print(call["template"])
    print("\n".join(l for l in build.stderr.splitlines() if "registers" in l or "spill" in l))
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m:
            ops[m.group(1)] += 1
    print(f"{sum(ops.values())} SASS instructions:", ", ".join(f"{k} {v}" for k, v in ops.most_common(20)))


if __name__ == "__main__":
    main()
