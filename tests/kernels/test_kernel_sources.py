"""Every GPU kernel comes from metal/, and its CUDA form compiles (nvcc, where present).

The CUDA path must not carry a kernel of its own: gpu.py hands mx.fast.cuda_kernel the same
metal/*.metal bodies that mx.fast.metal_kernel gets, behind metal/cuda_compat.h.
"""

import itertools
from pathlib import Path

import mlx.core as mx
import pytest

from fusedattend import gpu
from tests.kernels import nvcc_wrap

ROOT = Path(__file__).resolve().parents[2]
CUDA_ONLY_MARKERS = ("__global__", "__shfl", "threadIdx", "blockIdx")


def test_kernel_files_live_in_metal_dir():
    for name in gpu.KERNEL_FILES + gpu.HEADER_FILES + (gpu.CUDA_COMPAT,):
        assert (ROOT / "metal" / name).is_file(), name


def test_metal_bodies_hold_no_cuda():
    for name in gpu.KERNEL_FILES + gpu.HEADER_FILES:
        text = (ROOT / "metal" / name).read_text()
        for marker in CUDA_ONLY_MARKERS:
            assert marker not in text, f"{name} uses CUDA's {marker}"


def test_python_side_holds_no_kernel_code():
    """gpu.py may only name Metal's thread variables from CUDA's, nothing more."""
    for path in (ROOT / "fusedattend").glob("*.py"):
        text = path.read_text()
        if path.name == "gpu.py":
            text = text.replace(gpu.CUDA_THREAD_ATTRIBUTES, "")
        for marker in ("__global__", "__shfl", "__syncthreads", "simd_sum(", "threadgroup float"):
            assert marker not in text, f"{path.name} holds kernel code ({marker})"


def test_compat_header_is_small():
    lines = [l for l in (ROOT / "metal" / gpu.CUDA_COMPAT).read_text().splitlines() if l.strip()]
    assert len(lines) <= 80


def _decode_inputs(quantized, dtype, mask_dtype):
    if quantized:
        names = [("q", dtype), ("k_codes", mx.uint32), ("k_scales", dtype), ("k_biases", dtype),
                 ("v_codes", mx.uint32), ("v_scales", dtype), ("v_biases", dtype)]
    else:
        names = [("q", dtype), ("k", dtype), ("v", dtype)]
    return names + [("mask", mask_dtype), ("key_ranges", mx.int32), ("params", mx.float32)]


# A few template points that cover every branch of the bodies (not the full product).
CASES = [
    # quantized, dtype, mask kind, mask dtype, D, bits
    (False, mx.bfloat16, 0, mx.bool_, 128, None),
    (False, mx.float16, 2, mx.bool_, 80, None),
    (False, mx.float32, 3, mx.float32, 256, None),
    (True, mx.bfloat16, 1, mx.bool_, 128, 4),
    (True, mx.float16, 3, mx.float16, 64, 2),
    (True, mx.float32, 2, mx.bool_, 256, 8),
]


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("quantized,dtype,mask_kind,mask_dtype,D,bits", CASES)
def test_cuda_form_of_decode_kernel_compiles(monkeypatch, quantized, dtype, mask_kind, mask_dtype, D, bits):
    monkeypatch.setattr(gpu, "on_metal", lambda: False)
    source, header = gpu.kernel_sources("decode_attention.metal", (("FA_QUANTIZED", int(quantized)),))
    template = [("T", dtype), ("D", D), ("KL", 1 << (D // 8 - 1).bit_length()), ("ROWS", 4),
                ("L", 1), ("G", 4), ("NSG", gpu.SIMDGROUPS), ("BLOCK", 128),
                ("MASK_KIND", mask_kind), ("HAS_RANGES", True)]
    if quantized:
        template += [("BITS", bits), ("GROUP", 64)]
    text = nvcc_wrap.wrap("fa_decode", source, header, _decode_inputs(quantized, dtype, mask_dtype),
                          [("out_partial", mx.float32), ("stats_partial", mx.float32)], template)
    ok, log = nvcc_wrap.compile_cuda(text)
    assert ok, log


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_cuda_form_of_merge_kernel_compiles(monkeypatch, dtype):
    monkeypatch.setattr(gpu, "on_metal", lambda: False)
    source, header = gpu.kernel_sources("merge_partials.metal")
    text = nvcc_wrap.wrap("fa_merge", source, header,
                          [("out_partial", mx.float32), ("stats_partial", mx.float32)],
                          [("out", dtype)], [("T", dtype), ("D", 128)])
    ok, log = nvcc_wrap.compile_cuda(text)
    assert ok, log
