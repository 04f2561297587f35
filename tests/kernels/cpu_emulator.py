"""The GPU backend with its kernels run on the CPU: every metal/ body compiled as C++ (g++) behind
tests/kernels/cpu_compat.h, one fiber per GPU thread.

    with emulated_gpu():                       # patches fusedattend for the block
        out = fusedattend.decode_attention(q, k, v, backend="cuda")

Everything of fusedattend/gpu/ runs as it does on a GPU (schedule, launch set-up, both
launches); only `mx.fast.metal_kernel` / `mx.fast.cuda_kernel` are replaced by a stand-in that
compiles the same Metal source for the host. So machines without a GPU, CI included, check the
kernels' logic: exp2 is the C library's rather than the GPU's approximation, everything else is
the kernels' own arithmetic in the kernels' order. Slow (one fiber per GPU thread, in turn): keep shapes small.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

from fusedattend import backends, gpu
from fusedattend.gpu import launch as gpu_launch, sources
from tests.kernels.guarded_memory import EmulatedFault, GuardedBuffers

__all__ = ["EmulatedFault", "EmulatedKernel", "compiler_available", "emulated_gpu"]

COMPAT = Path(__file__).with_name("cpu_compat.h")
CPP_TYPES = sources.METAL_TYPE_NAMES  # cpu_compat.h names the types as Metal does
STORAGE = {  # numpy dtype holding each MLX dtype's bits
    mx.float32: np.float32, mx.float16: np.float16, mx.bfloat16: np.uint16,
    mx.uint32: np.uint32, mx.int32: np.int32, mx.bool_: np.bool_,
}
THREAD_ATTRIBUTES = """
const uint3 threadgroup_position_in_grid = fa_group;
const uint thread_index_in_threadgroup = fa_thread;
const uint thread_index_in_simdgroup = fa_thread % 32;
const uint simdgroup_index_in_threadgroup = fa_thread / 32;
"""


def compiler_available() -> bool:
    return shutil.which("g++") is not None


def _as_passed(x: mx.array) -> np.ndarray:
    """x's memory as MLX hands it to our kernels (ensure_row_contiguous=False): from x's first
    element, with x's own strides, no copy (bfloat16 as uint16). A body that reads an input
    without its `_strides` then reads that memory row-major, as the GPU does: until 6e60b02 a
    strided key_ranges view was read so on the H200, and a contiguous copy here hid it."""
    if x.dtype == mx.bfloat16:
        x = x.view(mx.uint16)
    return np.asarray(x)


def _from_numpy(a: np.ndarray, dtype) -> mx.array:
    out = mx.array(a)
    return out.view(mx.bfloat16) if dtype == mx.bfloat16 else out


def _fresh_output(shape, dtype):
    """An output buffer as a launch without init_value gets it: garbage (every bit set: NaN
    floats, -1 ints), as fresh device memory may hold, so that a kernel relying on zeros fails
    here."""
    storage = np.dtype(STORAGE[dtype])
    return np.full(math.prod(shape) * storage.itemsize, 0xFF, dtype=np.uint8).view(storage).reshape(shape)


def _parameters(body, input_names):
    """The kernel's parameters in MLX's order: (parameter, input index, what): each input's
    buffer, then its shape and strides where the body names them."""
    for i, name in enumerate(input_names):
        yield name, i, "data"
        for what in ("shape", "strides"):
            if f"{name}_{what}" in body:
                yield f"{name}_{what}", i, what


PARAMETER_TYPES = {"shape": "const int32_t", "strides": "const int64_t"}


def _program(body, header, inputs, output_names, output_dtypes):
    """C++ text: `run(args, groups, threads)` unpacks the buffers as the kernel names them."""
    lines = [COMPAT.read_text(), header,
             'extern "C" int run(void** args, const unsigned* groups, unsigned threads) {',
             '  return fa_cpu_trapped([&] {']
    names = [name for name, _ in inputs]
    params = [(param, PARAMETER_TYPES.get(what, f"const {CPP_TYPES[inputs[i][1]]}"))
              for param, i, what in _parameters(body, names)]
    params += [(name, CPP_TYPES[dtype]) for name, dtype in zip(output_names, output_dtypes)]
    for slot, (param, ctype) in enumerate(params):
        lines.append(f"  auto {param} = static_cast<{ctype}*>(args[{slot}]);")
    lines.append("  fa_cpu_launch(uint3{groups[0], groups[1], groups[2]}, threads,"
                 " [&](uint3 fa_group, uint fa_thread) {")
    lines += [THREAD_ATTRIBUTES, body, "  });", "  });", "}"]
    return "\n".join(lines)


def _build(text: str) -> ctypes.CDLL:
    """Compile once per distinct program (cached on disk by its hash)."""
    cache = Path(tempfile.gettempdir()) / "fusedattend-cpu-kernels"
    cache.mkdir(exist_ok=True)
    lib = cache / (hashlib.sha256(text.encode()).hexdigest()[:24] + ".so")
    if not lib.exists():  # xdist workers may build the same program at once: private names
        src = lib.with_suffix(f".{os.getpid()}.cpp")
        src.write_text(text)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        # No _FORTIFY_SOURCE: its checked longjmp refuses cpu_compat.h's jump out of a faulting fiber.
        proc = subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-U_FORTIFY_SOURCE", "-shared", "-fPIC", str(src),
                               "-o", str(tmp)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"g++ failed on {src}:\n{proc.stderr[-4000:]}")
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


# Layout "nvidia": metal/cuda_compat.h's matrix section (from FA_HAVE_MMA on: where a lane's
# elements sit, the row masks, fa_acc_as_b) compiled as it is, but for its two `asm` products,
# which become the emulated mma.sync of cpu_compat.h (fa_cpu_mma_m16n8k8 / k16, PTX's tables).
NVIDIA_PRELUDE = """
#define __shfl_sync(mask, x, from) simd_shuffle(x, ushort(from))
inline uint32_t __float_as_uint(float x) { return as_type<uint32_t>(x); }
inline float __uint_as_float(uint32_t x) { return as_type<float>(x); }
"""
NVIDIA_PRODUCTS = """
template <typename F>
inline void fa_mma2(F& d0, F& d1, F a0, F a1, F b, F c0, F c1) {
  const float a[4] = {a0.e[0], a1.e[0], a0.e[1], a1.e[1]}, bb[2] = {b.e[0], b.e[1]};
  const float c[4] = {c0.e[0], c0.e[1], c1.e[0], c1.e[1]};
  float d[4];
  fa_cpu_mma_m16n8k8(a, bb, c, d);
  d0.e[0] = d[0], d0.e[1] = d[1], d1.e[0] = d[2], d1.e[1] = d[3];
}
template <typename F>
inline void fa_mma2_any_b(F& d0, F& d1, F a0, F a1, F b, F c0, F c1) {
  F hi, lo;
  for (int j = 0; j < 2; ++j) {  // cvt.rna.tf32.f32: to nearest, ties away from zero
    hi.e[j] = as_type<float>((as_type<uint32_t>(b.e[j]) + 0x1000u) & 0xFFFFE000u);
    lo.e[j] = b.e[j] - hi.e[j];
  }
  fa_mma2(d0, d1, a0, a1, lo, c0, c1);
  fa_mma2(d0, d1, a0, a1, hi, d0, d1);
}
template <typename T, typename F, typename F16>
inline void fa_mma2_16(F& d0, F& d1, F16 a0, F16 a1, F16 b, F c0, F c1) {
  const uint32_t a[4] = {a0.w[0], a1.w[0], a0.w[1], a1.w[1]}, bb[2] = {b.w[0], b.w[1]};
  const float c[4] = {c0.e[0], c0.e[1], c1.e[0], c1.e[1]};
  float d[4];
  fa_cpu_mma_m16n8k16<T>(a, bb, c, d);
  d0.e[0] = d[0], d0.e[1] = d[1], d1.e[0] = d[2], d1.e[1] = d[3];
}
"""
ASM_PRODUCT = re.compile(r"template <typename (F|T, typename F, typename F16)>\nMETAL_FUNC void fa_mma2(_any_b|_16)?\(.*?\n}\n",
                         re.S)


def nvidia_fragments() -> str:
    """cuda_compat.h's matrix section for the CPU, its three asm products emulated."""
    text = sources.read_kernel_file(sources.CUDA_COMPAT)
    section = text[text.index("#define FA_HAVE_MMA"):]
    kept, n = ASM_PRODUCT.subn("", section)
    assert n == 3 and "asm" not in kept, "cuda_compat.h's matrix products changed shape"
    return NVIDIA_PRELUDE + kept + NVIDIA_PRODUCTS


class EmulatedKernel:
    """Called as an mx.fast.metal_kernel / cuda_kernel object is; runs on the CPU."""

    layout = "apple"  # of the simdgroup matrices: Apple's (Metal form), or "nvidia" (cuda_compat.h's)
    fiber_seed = 0  # 0: a threadgroup's fibers take turns in order; else a random order of this seed

    def __init__(self, name, input_names, output_names, body_file, defines=(), launch_bounds=None, constants=()):
        self.input_names, self.output_names = list(input_names), list(output_names)
        self.body_file, self.defines, self.constants = body_file, defines, constants  # launch bounds: CUDA only

    def __call__(self, *, inputs, grid, threadgroup, output_shapes, output_dtypes, **_):
        body, header = sources.kernel_sources(self.body_file, self.defines, constants=self.constants)  # the Metal form
        if self.layout == "nvidia":
            header = nvidia_fragments() + header
        program = _program(body, header, list(zip(self.input_names, [x.dtype for x in inputs])),
                           self.output_names, output_dtypes)
        lib = _build(program)
        lib.run.restype = ctypes.c_int
        lib.fa_cpu_fault_address.restype = ctypes.c_void_p
        lib.fa_cpu_set_fiber_order(ctypes.c_uint(self.fiber_seed))
        guarded = GuardedBuffers()  # every buffer ends at a no-access page
        try:
            keep, args = [], []  # numpy buffers stay alive until the call returns

            def push(a):
                keep.append(a)
                args.append(a.ctypes.data_as(ctypes.c_void_p))

            buffers = [guarded.place(_as_passed(x), name) for x, name in zip(inputs, self.input_names)]
            for _, i, what in _parameters(body, self.input_names):
                a = buffers[i]
                if what == "shape":
                    a = guarded.place(np.array(inputs[i].shape, dtype=np.int32), f"{self.input_names[i]}_shape")
                elif what == "strides":
                    a = guarded.place(np.array([s // a.itemsize for s in a.strides], dtype=np.int64),
                                      f"{self.input_names[i]}_strides")
                push(a)
            outs = [guarded.place(_fresh_output(shape, dtype), name)
                    for shape, dtype, name in zip(output_shapes, output_dtypes, self.output_names)]
            for a in outs:
                push(a)
            groups = [(g + t - 1) // t for g, t in zip(grid, threadgroup)]  # grid counts threads
            threads = threadgroup[0] * threadgroup[1] * threadgroup[2]
            status = lib.run((ctypes.c_void_p * len(args))(*args), (ctypes.c_uint * 3)(*groups), ctypes.c_uint(threads))
            if status == 2:
                raise EmulatedFault(f"{self.body_file} ({dict(self.defines)}): deadlock, every thread waits at a barrier")
            if status:
                address = lib.fa_cpu_fault_address() or 0
                where = guarded.owner_of(address) or "memory no buffer holds"
                raise EmulatedFault(f"{self.body_file} ({dict(self.defines)}) faulted at {address:#x}: {where}")
            return [_from_numpy(a.copy(), dtype) for a, dtype in zip(outs, output_dtypes)]
        finally:
            guarded.close()


@contextlib.contextmanager
def emulated_gpu(layout="apple", fiber_seed=0):
    """Within the block, backend="cuda" is available and runs fusedattend.gpu with every kernel
    emulated (the Metal form of its body, compiled for the host). layout="nvidia" gives the
    simdgroup-matrix products cuda_compat.h's placement of elements instead of Apple's.
    fiber_seed: 0 runs a threadgroup's threads in turn (0, 1, 2, ... at each wait), another value
    in a random order drawn from it (cpu_compat.h), which exposes a missing barrier that the
    strict turns hide. Every input and output ends at a no-access page (guarded_memory.py): a
    read past one raises EmulatedFault."""
    saved = gpu_launch._kernel, sources.on_metal, backends._is_available
    real = backends._is_available
    kernel = type("EmulatedKernel", (EmulatedKernel,), {"layout": layout, "fiber_seed": fiber_seed})
    gpu_launch._kernel, sources.on_metal = kernel, (lambda: True)
    backends._is_available = lambda name: name == "cuda" or real(name)
    backends.forget_replays()  # replayed launchers hold the kernels they were made with
    try:
        yield
    finally:
        gpu_launch._kernel, sources.on_metal, backends._is_available = saved
        backends.forget_replays()
