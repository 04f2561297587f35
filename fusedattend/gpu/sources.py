"""The kernels' text as handed to mx.fast.{metal,cuda}_kernel.

Each kernel is written once, in Metal (metal/*.metal bodies, metal/decode_attention.h helpers).
On Apple GPUs they go to mx.fast.metal_kernel as they are; on NVIDIA to mx.fast.cuda_kernel behind
metal/cuda_compat.h, with Metal's thread-position variables declared from CUDA's at the top of
the body (CUDA_THREAD_ATTRIBUTES: the only kernel text in this package).
"""

from __future__ import annotations

import hashlib
import os
import re
from importlib import resources
from pathlib import Path
from typing import Optional

import mlx.core as mx

KERNEL_FILES = ("decode_attention.metal", "merge_partials.metal", "decode_mma.metal")
HEADER_FILES = ("decode_attention.h",)
CUDA_COMPAT = "cuda_compat.h"

# Metal passes these as kernel attributes; CUDA derives them from blockIdx/threadIdx.
CUDA_THREAD_ATTRIBUTES = """
const uint3 threadgroup_position_in_grid = blockIdx;
const uint thread_index_in_threadgroup = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
const uint thread_index_in_simdgroup = thread_index_in_threadgroup % 32;
const uint simdgroup_index_in_threadgroup = thread_index_in_threadgroup / 32;
"""


def kernel_dir():
    """metal/ of a source checkout, else the installed `fusedattend.metal` package."""
    checkout = Path(__file__).resolve().parents[2] / "metal"
    if (checkout / KERNEL_FILES[0]).is_file():
        return checkout
    return resources.files("fusedattend.metal")


def read_kernel_file(name: str) -> str:
    return (kernel_dir() / name).read_text()


def on_metal() -> bool:
    """Whether kernels go to Metal (else CUDA). The CPU emulation replaces this for its block."""
    return mx.metal.is_available()


def compact_source(text: str) -> str:
    """text without comments, indentation or blank lines. MLX builds each kernel's whole source
    string again on every call (custom_kernel.cpp's build_kernel), so its length is host time a
    call. A blank line that ends a macro (after a line ending in a backslash) stays."""
    lines = []
    for line in text.splitlines():
        code = line.split("//", 1)[0].strip()  # the kernels hold no "//" but in comments
        if code or (lines and lines[-1].endswith("\\")):
            lines.append(code)
    return "\n".join(lines) + "\n"


# A kernel's compile-time constants (T, D, NSG, ...) open its body as constexpr / using lines,
# as MLX writes template arguments, once per kernel object: passed as `template` with each call,
# MLX converts and formats them on every call (1.5 µs of host time a call for the decode kernel's
# nine: docs/decisions/schedule-host-inputs.md). Types by the compiler's names.
METAL_TYPE_NAMES = {mx.float32: "float", mx.float16: "half", mx.bfloat16: "bfloat16_t", mx.bool_: "bool",
                    mx.int32: "int32_t", mx.uint32: "uint32_t"}
CUDA_TYPE_NAMES = {**METAL_TYPE_NAMES, mx.float16: "__half", mx.bfloat16: "__nv_bfloat16"}


def constant_lines(constants, type_names) -> str:
    """(name, int | bool | Dtype) pairs as the lines MLX writes for template arguments."""
    lines = []
    for name, value in constants:
        if isinstance(value, bool):
            lines.append(f"constexpr bool {name} = {'true' if value else 'false'};\n")
        elif isinstance(value, int):
            lines.append(f"constexpr int {name} = {value};\n")
        else:
            lines.append(f"using {name} = {type_names[value]};\n")
    return "".join(lines)


def kernel_sources(body_file: str, defines=(), launch_bounds=None, constants=(), *, compact=True, by_path=False):
    """(source, header) exactly as handed to mx.fast.{metal,cuda}_kernel on this platform.

    launch_bounds: (threads, threadgroups an SM) for CUDA's __launch_bounds__, or None.
    constants: the body's compile-time constants (constant_lines).
    compact=False: the files' text as it is.
    by_path=True (CUDA): each file as an #include of its path (include_line), None where a path
    cannot be written so."""
    text_of = read_kernel_file
    if by_path:
        lines = {} if on_metal() else {name: include_line(name) for name in (body_file, CUDA_COMPAT, *HEADER_FILES)}
        if not lines or None in lines.values():
            return None
        text_of = lines.__getitem__
    body = "".join(f"#define {k} {v}\n" for k, v in defines) + text_of(body_file)
    header = "".join(text_of(h) for h in HEADER_FILES)
    if on_metal():
        body = constant_lines(constants, METAL_TYPE_NAMES) + body
    else:
        bounds = "#define FA_LAUNCH_BOUNDS {}, {}\n".format(*launch_bounds) if launch_bounds else ""
        body = constant_lines(constants, CUDA_TYPE_NAMES) + CUDA_THREAD_ATTRIBUTES + body
        header = bounds + text_of(CUDA_COMPAT) + header
    if by_path:  # the body's own names of inputs' shapes and strides, which MLX looks for
        body += "/* " + " ".join(array_attribute_names(compact_source(read_kernel_file(body_file)))) + " */\n"
    if not compact:
        return "\n" + body, header
    return "\n" + compact_source(body), compact_source(header)


# MLX passes an input's shape, strides or ndim only where the body's text names them (its
# `source.find(name + "_shape")`): a body by path lists those names in a comment.
ARRAY_ATTRIBUTE = re.compile(r"\w*_(?:shape|strides|ndim)\w*")


def array_attribute_names(text: str) -> list:
    """The words of text holding _shape, _strides or _ndim, once each, in order: every place
    where MLX's search for name + "_shape" (and the others) can match."""
    return list(dict.fromkeys(ARRAY_ATTRIBUTE.findall(text)))


def include_line(name: str) -> Optional[str]:
    """`#include "<path of name>"`, or None where metal/ is not plain files on disk or the path
    holds a character the line cannot carry."""
    path = kernel_dir() / name
    if not isinstance(path, Path) or not path.is_file():
        return None
    text = str(path.resolve())
    if not os.path.isabs(text) or any(c in text for c in '"\\\n') or "//" in text:
        return None
    return f'#include "{text}"\n'


def kernel_name(name: str, source: str, header: str) -> str:
    """name with a digest of the text compiled. MLX's CUDA backend keeps compiled kernels on disk
    by name alone (MLX_PTX_CACHE_DIR, per MLX version): a name that stayed the same when the
    source changed would hand the next process an earlier version's build."""
    return f"{name}_{hashlib.sha256((header + source).encode()).hexdigest()[:12]}"


def kernel_text(name: str, body_file: str, defines=(), launch_bounds=None, constants=()):
    """(digest-named kernel name, source, header) to compile. On CUDA each file goes by its path
    where every path can be written so (NVRTC reads an #include from disk, and MLX copies the
    whole source string into every call: about 0.9 KB a kernel instead of 28;
    docs/decisions/schedule-host-inputs.md), else as text. The digest is of the text either way."""
    source, header = kernel_sources(body_file, defines, launch_bounds, constants)
    full_name = kernel_name(name, source, header)
    by_path = kernel_sources(body_file, defines, launch_bounds, constants, by_path=True)
    if by_path is not None:
        source, header = by_path
    return full_name, source, header
