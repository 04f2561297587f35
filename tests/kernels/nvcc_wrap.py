"""Compile the CUDA form of the metal/ kernels with nvcc, wrapped as mx.fast.cuda_kernel wraps them.

MLX (mlx/backend/cuda/custom_kernel.cpp) puts the header after its own includes, then declares
`__global__ void name(const T* in, [Shape in_shape,] [Strides in_strides,] ..., T* out...)` inside
namespace mlx::core::cu and appends the body (which opens with its compile-time constants:
sources.constant_lines). This module rebuilds that text with a stand-in for MLX's device header, so a
machine with nvcc but no GPU (or no MLX CUDA build) can prove every kernel compiles.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx

from fusedattend import gpu
from fusedattend.gpu import sources

CUDA_TYPES = sources.CUDA_TYPE_NAMES

MLX_DEVICE_HEADER_STANDIN = """
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#include <cstdint>
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, 10>;
using Strides = cuda::std::array<int64_t, 10>;
}
"""


def wrap(name, source, header, inputs, outputs):
    """inputs/outputs: lists of (name, mx dtype)."""
    lines = [MLX_DEVICE_HEADER_STANDIN, header, "namespace mlx::core::cu {", f"__global__ void {name}("]
    params = []
    for arg, dtype in inputs:
        params.append(f"const {CUDA_TYPES[dtype]}* {arg}")
        for suffix, kind in (("_shape", "Shape"), ("_strides", "Strides"), ("_ndim", "int")):
            if arg + suffix in source:
                params.append(f"const __grid_constant__ {kind} {arg}{suffix}")
    params += [f"{CUDA_TYPES[dtype]}* {arg}" for arg, dtype in outputs]
    lines.append(",\n".join(params) + ") {")
    lines += [source, "}", "}"]
    return "\n".join(lines)


def wrap_launch(launch):
    """The CUDA text MLX would compile for a gpu.decode_launch() dict, on this platform's form of
    the sources (the caller makes sources.on_metal() false for the CUDA one)."""
    source, header = sources.kernel_sources(launch["body_file"], launch["defines"], launch["launch_bounds"],
                                        launch["constants"])
    call = launch["call"]
    inputs = [(name, x.dtype) for name, x in zip(launch["input_names"], call["inputs"])]
    outputs = list(zip(launch["output_names"], call["output_dtypes"]))
    return wrap("fa_decode", source, header, inputs, outputs)


def nvcc_available():
    return shutil.which("nvcc") is not None


def compile_cuda(text, arch="sm_90", options=(), ptx=False):
    """Compile `text` with nvcc (and `options`, e.g. ("-Xptxas", "-v")); returns (ok, log), or
    with `ptx` (ok, log, the PTX text)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(text)
        out = Path(tmp) / ("k.ptx" if ptx else "k.o")
        proc = subprocess.run(
            ["nvcc", f"-arch={arch}", "-std=c++17", *options, "-ptx" if ptx else "-c", str(src), "-o", str(out)],
            capture_output=True, text=True,
        )
        ok, log = proc.returncode == 0, proc.stdout + proc.stderr
        return (ok, log, out.read_text() if ok else "") if ptx else (ok, log)
