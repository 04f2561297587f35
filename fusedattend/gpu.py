"""The "metal" and "cuda" backends: the kernels under metal/, compiled for the GPU at hand.

Each kernel is written once, in Metal (metal/*.metal bodies, metal/decode_attention.h helpers).
On Apple GPUs they go to mx.fast.metal_kernel as they are; on NVIDIA they go to
mx.fast.cuda_kernel behind metal/cuda_compat.h, with Metal's thread-position variables declared
from CUDA's at the top of the body. No kernel logic lives in this file: it picks the schedule
and launches.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import NamedTuple, Optional

import mlx.core as mx

from . import backends
from ._problem import Problem

SIMD_WIDTH = 32
# Simdgroups of a split block's threadgroup. 2 was faster in sweeps whose calls are independent
# (B = 32, S = 32768: 1235 against 1252 µs), but with each call waiting for the one before, as a
# model's layers do (docs/h200/chain/), 4 was faster at B = 1 (S = 2048: 78.5 against 85.8 µs;
# S = 32768: 124.0 against 150.2) and 2% slower at B = 32.
SIMDGROUPS = 4
# The same for decode_mma.metal's split blocks, per form. H200, chained and cold, 3 rounds
# (docs/h200/simdgroups/sweep-simdgroups.log, 2026-11-30), µs at B = 32, S = 2048 / 8192 / 32768:
# 4-bit with 2 (4 threadgroups of 2 warps an SM, twice the tiles a warp) 170 / 295 / 741 against
# 201 / 354 / 773 with 4, B = 8 3-9% faster, B = 1 within the noise (geometric mean over B = 1,
# 8, 32 x S = 2048, 8192, 32768: 183.5 against 194.4); 1 was slower at B = 1 (170 against 148 at
# S = 32768). Plain K/V (which take the matrix kernel from PLAIN_LONG_BLOCKS_FROM_S on) keep 4:
# with 2 and 1, B = 1, S = 32768 took 125 and 145 µs against 115, B = 8 and 32 within 2%; with 8
# (2026-12-01, docs/h200/plain-pieces/, chained) 1.03-1.20x slower at S >= 8192 and at B = 32, and
# within the samples' spread at B = 1 and 8, S = 2048. (Each simdgroup a threadgroup of its own at
# small grids, the same tiles on four times the SMs, was 5-19% slower at B = 1: docs/h200/spread/.)
QUANTIZED_MMA_SIMDGROUPS = 2
PLAIN_MMA_SIMDGROUPS = 4
# A single-pass threadgroup streams all S keys of its rows alone: more simdgroups keep more keys
# in flight (at most 8: 256 threads x 230 registers of the 4-bit variant fit in 64K). 2 and 8 were
# no faster (docs/h200/cold/).
SINGLE_PASS_SIMDGROUPS = 4
ELEMENTS_PER_LANE = 8  # E: elements of a K/V row a lane holds (at least D / 32)
KEY_BYTES_IN_FLIGHT = 32  # a lane's bytes of K (as many of V) loaded before any is used
# The same in one block: U = 4 keys for bf16 (212 registers, 2 threadgroups an SM). A one-block
# launch has few threadgroups (B x H_kv x tiles), so it is short of loads in flight, not of
# registers. H200, calls one after the other (docs/h200/chain/sweep-chain-2.log), S = 512:
# B = 8 / 32: 60.3 / 75.9 against 66.1 / 80.4 µs with U = 2, B = 1 even. Split blocks, whose grids
# fill the SMs, keep U = 2 (U = 4 there: B = 32, S = 32768: 1337 against 1252 µs).
SINGLE_PASS_KEY_BYTES_IN_FLIGHT = 64
MAX_KEYS_IN_FLIGHT = 4
QUANTIZED_KEYS_IN_FLIGHT = 4  # U for quantized K/V (each key also loads 4 scales and biases)
MAX_ROWS = 8  # query rows (GQA heads x positions) per threadgroup; more rows -> more tiles
MAX_ROW_ELEMENTS = 32  # ROWS * E: floats of scaled query (and as many of output) a lane keeps
# Split blocks: TARGET_BLOCKS a (request, kv head) where S allows (fills 132 SMs at B = 1), of
# MIN_BLOCK to MAX_BLOCK keys (a power of two). MIN_BLOCK 256 against 128 (blocks of 256 keys
# from S = 513 to 8192, where 128 took them up to S = 4096), H200, chained and cold, µs bf16 /
# 4-bit (docs/h200/replay/sweep-blocks*.log, 2026-11-30): B = 32, S = 2048: 128.1-130.1 /
# 125.4-132.1 against 138.7-143.4 / 148.2-148.9; S = 4096: 205.5 / 177.2 against 232.1 / 221.1;
# B = 8, S = 2048 and 4096: 3-9% faster. B = 1, S = 2048: 58.0-65.0 against 52.8-68.0 (bf16);
# S = 4096: 66.9 and 79.0 against 52.9 and 63.7, slower or B = 1's noise (one 4-bit schedule
# took 63.0 and 93.9 there in one sweep). 16 target blocks (512 keys at S = 8192) gained 8-9% at
# B = 32, S = 8192 but lost at B = 1 in the 6-round sweep (83.3 against 75.9): not taken.
MIN_BLOCK, MAX_BLOCK = 256, 1024
TARGET_BLOCKS = 32
# Plain K/V that the matrix kernel can take (f16 / bf16, D a multiple of 32 up to 128: _uses_mma)
# take blocks of MAX_BLOCK keys from this S on, and with them that kernel: its long blocks draw
# the bandwidth where decode_attention.metal's 256-key blocks are bound by their instruction
# stream (B = 32, S = 2048, Nsight Compute: 84-86 µs, DRAM at 65-67% of its peak, against
# 100-103 µs at 56-57%; 12.9 M warp-instructions against 59.1 M). 513 is the first S split by
# default (SINGLE_PASS_MAX_S): every split S. H200, K/V out of L2, bf16 µs, queued / chained,
# copies of the policy before (4096) against 513 (docs/h200/long-from-513/, 2026-12-01):
#   B = 32, S = 1024: 69.1-73.5 / 82.4-89.1 against 58.9 / 77.6
#   B = 32, S = 2048: 101.6-109.0 / 121.6-126.5 against 93.0-95.7 / 110.4-112.9
#   B = 32, S = 3072: 145.2-146.2 / 165.2-171.1 against 123.5 / 153.1
# B = 1 and 8 at S = 768-3072 faster or within the spread of those copies, but for B = 1,
# S = 768 queued: 27.5 against 22.7-25.9. On 2026-11-30's kernels B = 1 had lost
# below 4096 (docs/h200/long-from-4096/); the plain matrix kernel has changed since
# (16-bit V^T). Like the block itself this depends on S and the format, never on B or NL.
# Quantized K/V keep TARGET_BLOCKS: there 1024-key blocks lost at B = 1 (S = 8192: 56.7 against
# 72.0; S = 16384: 71.7 against 82.2), however much they gained at B = 8 and 32. Again for longer
# ones (docs/h200/quantized-blocks/, 2026-12-02, chained and cold): 16 blocks of at most 2048 keys
# took B = 32, S = 32768 from 480.0-485.6 to 464.0-471.5 µs and B = 1 from 66.7-68.4 to 79.2-82.5.
PLAIN_LONG_BLOCKS_FROM_S = 513
# From this S on those blocks are PLAIN_LONGER_BLOCK keys: fewer partials and fewer threadgroup
# starts where there are still 16 blocks or more a row. H200, K/V out of L2, bf16 µs, two copies
# of 1024-key blocks against 2048 (docs/h200/plain-max-block/, 2026-12-01, 5 and 6 rounds),
# queued / chained: B = 32, S = 32768: 1040.9-1042.3 / 1039.6-1040.2 against 1014.9 / 1018.9;
# B = 8, S = 32768: 282.5-288.2 / 296.9-300.8 against 278.6 / 289.1; B = 8, S = 65536:
# 551.9-552.4 / 549.9-553.9 against 540.4 / 541.8; B = 1 level or faster (S = 65536 chained 101.9
# against 109.8-115.9). At S = 16384 B = 1 chained lost (69.4 against 58.4-62.3), at S = 8192
# more (62.6 against 47.8-48.5).
PLAIN_LONGER_BLOCKS_FROM_S = 32768
PLAIN_LONGER_BLOCK = 2048
MAX_GRID_Z = 65535  # CUDA's limit on gridDim.z (the layer x request axis)


def _env_keys(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ValueError(f"{name} must be a number of keys (a non-negative integer), got {value!r}")
    return int(value)


# Up to this S one block takes every key and the decode kernel writes the output itself: one
# launch instead of two (decode, merge). It depends on S only, as the block does, so batched
# output stays bit-identical to the per-request loop. H200 (docs/h200/chain/, 2026-11-29), K/V out
# of L2 and each call waiting for the one before, as a model's layers do, bf16 µs (split blocks of
# 2 simdgroups at S = 512, 2048 and 8192, of 4 at S = 1024):
#   S = 512:  one block faster at every B (B = 8: 59.2 against 81.6 split; B = 32: 89.7 against 100.7)
#   S = 1024: faster at B = 8 and 32 (86.6 / 94.0 against 98.8 / 122.9), slower at B = 1 (76.3 / 64.8)
#   S = 2048: slower at B = 1 and 8 (93.2 / 101.2 against 73.3 / 96.3), faster at B = 32 (130.8 / 157.7)
#   S = 8192: three times slower at B = 1 (249.4 against 82.7)
# A launch of B x 8 threadgroups cannot draw the bandwidth. Queued independent calls, which the
# GPU may overlap, had made one block look faster up to 8192 (docs/h200/cold/).
# FUSEDATTEND_SINGLE_PASS_MAX_S overrides it (0: always split).
SINGLE_PASS_MAX_S = _env_keys("FUSEDATTEND_SINGLE_PASS_MAX_S", 512)

# Quantized K/V with f16 / bf16 queries and D <= MMA_MAX_D take the simdgroup-matrix kernel
# (decode_mma.metal; tensor cores on NVIDIA); f32 queries, whose values are not exact in the
# matrices' operand type there, and larger D (whose output tiles would not fit the registers) take
# decode_attention.metal. So do plain f16 / bf16 K/V with D a multiple of PLAIN_MMA_D_MULTIPLE (a
# lane's runs of D / 4 and D / 8 elements then load as whole vectors), in one block (S <=
# SINGLE_PASS_MAX_S) or in split blocks of at least PLAIN_MMA_MIN_BLOCK keys; the choice depends on
# S, never on B or NL, as the block does. The matrix kernel issues 2.4x fewer instructions than
# decode_attention.metal, but its 229 registers leave 8 warps an SM, not 16: shorter blocks wait on
# their loads. H200, chained and cold (docs/h200/plain-mma/, 2026-11-30), bf16 µs, decode_attention
# against the matrix kernel: B = 32, S = 32768 (1024-key blocks): 1115.9 / 1068.8; B = 1, S = 32768:
# 115.6 / 96.2; S = 8192 (256-key blocks), B = 32: 368.6 / 555.9, B = 8: 143.5 / 190.5; B = 32,
# S = 2048: 150.8 / 172.4. FUSEDATTEND_QUANTIZED_MMA=0 and FUSEDATTEND_PLAIN_MMA=0 turn them off
# (for comparisons).
QUANTIZED_MMA = os.environ.get("FUSEDATTEND_QUANTIZED_MMA", "1").strip() != "0"
PLAIN_MMA = os.environ.get("FUSEDATTEND_PLAIN_MMA", "1").strip() != "0"
MMA_MAX_D = 128
PLAIN_MMA_D_MULTIPLE = 32
PLAIN_MMA_MIN_BLOCK = 1024
MMA_ROWS = 8  # query rows of a threadgroup: the matrices' rows
# The matrix kernel computes its loads' offsets in 32 bits when the arrays allow it (checked in
# the kernel: rows contiguous, every offset within a kv head's rows below 2^31). False keeps
# 64-bit offsets always (for comparisons, and for tests of that path on contiguous arrays).
MMA_OFFSETS32 = True
# The matrix kernel's scores on 16-bit operands (f16 / bf16, m16n8k16 on NVIDIA) where a code fits
# them exactly (score_mantissa); False keeps 32-bit ones (tf32) always (for comparisons and tests).
SCORES16 = True
# The quantized matrix kernel's output products on 16-bit operands (out_mantissa): V codes as
# bf16 1 + c / 2^bits, a word pairing two keys of one dim (one byte permute and a shift and a
# logic op make two), against the weights as three bf16 parts (float's range and its 24 bits),
# m16n8k16 over the whole 16-key tile on NVIDIA. H200, chained and cold, 4-bit µs against tf32
# (docs/h200/out16/three-parts/, 2026-11-30): B = 32, S = 8192: 245.4 / 261.4; B = 8,
# S = 32768: 202.2 / 211.6; B = 32, S = 32768: 733.8 / 746.0. False keeps 32-bit operands (tf32,
# one code an operand, two products of k = 8 a tile) always (for comparisons and tests).
OUT16 = True

# CUDA only: threadgroups an SM that ptxas must make room for (__launch_bounds__, through
# cuda_compat.h), so that it caps a thread's registers at 64K / (threads x this); 0 leaves the
# registers to ptxas. Split blocks fill the GPU, so there more resident warps keep more loads in
# flight; a one-block launch has few threadgroups and is left alone. H200, chained and cold
# (docs/h200/bounds/, 2026-11-29), bf16 split blocks at 4 (128 registers, 12 bytes spilled)
# against ptxas' 158 (3 an SM): B = 32, S = 32768: 1140.9 against 1193.5 µs (Nsight Compute:
# 82.8% of DRAM bandwidth against 77.2%); B = 32, S = 2048: 159.9 against 179.7; B = 8,
# S = 8192: 156.2 against 161.5; B = 1 within the noise.
# The quantized matrix kernel's split blocks: 6 threadgroups of 2 simdgroups an SM, 168 registers,
# 12 warps where ptxas' choice left 8 (an SM's 4 schedulers hold 16K registers each, so 5 an SM
# would be capped at 168 too). Holding the scales as loaded (fa_chunk, one 32-bit load for two
# groups) took ptxas from 232 registers to 178 at 4-bit, group size 64, D = 128, and the cap then
# spills 24 bytes. H200, chained and cold, 4-bit µs, before the scales change / after it with
# ptxas' choice / after it at 6 an SM (docs/h200/scales/sweep-ab2.log, 2026-11-30): B = 32,
# S = 32768: 740.2 / 783.2 / 688.1; B = 8, S = 32768: 242.1 / 249.3 / 232.0; B = 32, S = 8192:
# 284.7 / 295.3 / 265.9; B = 1 within the noise (S = 2048: 67.4 / 68.3 / 67.5). Only where the
# cap spills little (nvcc 13.0, sm_90): at most 4 bits and 2 groups a row (0-40 bytes); 8 bits
# or 4 groups spill 184-584 bytes and keep ptxas' choice, as do one-block launches (4 simdgroups).
# Before 16-bit scores and packed scales the cap at 3 of 4 simdgroups spilled 186 bytes and lost
# (879.4 against 808.5 µs, docs/h200/scores16/sweep-variants.log).
SPLIT_THREADGROUPS_PER_SM = 4
QUANTIZED_MMA_THREADGROUPS_PER_SM = 6
# Short split blocks (at most QUANTIZED_SHORT_BLOCK keys) of that kernel: 8 threadgroups an SM
# (128 registers, 156 bytes spilled, 3 spill instructions in the loop), and each simdgroup asks
# the tile QUANTIZED_SHORT_BLOCK_PREFETCH_TILES of its tiles ahead into L2 (cuda_compat.h's
# fa_prefetch: prefetch.global.L2; nothing on Apple). A short block spends much of its time
# starting (its first tiles' loads) and ending; more of them an SM, and loads that find their
# tile in L2, overlap that.
# H200, chained and cold, 4-bit µs, e209863's form against this (docs/h200/short-blocks-5458c3c/
# extra/sweep-policy.log, 2026-11-30): B = 32, S = 8192: 257.6 / 222.0; S = 4096: 157.0 / 145.3;
# B = 8 and 1 within the noise. Long blocks keep 6 and no prefetch: there each lost (B = 32,
# S = 32768, 1024-key blocks, Nsight Compute: 554.4 µs, 561.4 with the prefetch, 642.9 at 8 an
# SM, where the loads waited longer: 2.05 against 1.27 cycles an instruction, DRAM at 41% of its
# peak against 46%). Neither changes what is computed, only registers and hints; like the block
# they depend on S alone.
QUANTIZED_SHORT_BLOCK = 512
QUANTIZED_SHORT_BLOCK_THREADGROUPS_PER_SM = 8
QUANTIZED_SHORT_BLOCK_PREFETCH_TILES = 2
QUANTIZED_MMA_BOUNDED_MAX_BITS, QUANTIZED_MMA_BOUNDED_MAX_GROUPS = 4, 2
# Split blocks of that kernel on CUDA stage their tiles through threadgroup memory, this many
# ahead (decode_mma.metal's STAGES; 0: not), where a key's codes are whole 16-byte pieces and its
# scales of each array 4, 8 or 16 bytes (what cp.async copies).
# On Apple the copies are plain loads and stores (no cp.async): not measured there, so off
# (STAGE_ON_METAL); the CPU emulation turns it on to check the staged kernel.
QUANTIZED_STAGES = 2
QUANTIZED_SHORT_BLOCK_STAGES = 2
STAGE_ON_METAL = False


def quantized_stages(single_pass, short, D, bits, group_size, scales_dtype) -> int:
    """decode_mma.metal's STAGES for a quantized launch (QUANTIZED_STAGES above)."""
    scale_bytes = D // group_size * scales_dtype.size
    if single_pass or (on_metal() and not STAGE_ON_METAL) or (D * bits // 32) % 4 or scale_bytes not in (4, 8, 16):
        return 0
    return QUANTIZED_SHORT_BLOCK_STAGES if short else QUANTIZED_STAGES
# Plain K/V on the matrix kernel, split: a launch of at most PLAIN_PREFETCH_MAX_THREADGROUPS
# threadgroups (B = 1 and other small grids) asks each simdgroup's tiles PLAIN_PREFETCH_TILES of its
# tiles ahead into L2 (fa_pmma_prefetch_tile; nothing on Apple): there each simdgroup walks its
# tiles one after the other with one tile's loads in flight, few warps an SM, and the GPU's time is
# that chain. A hint changes no result, so it may depend on the grid (on B), not only on S: a
# request's output stays bit-identical in any batch. H200, GPU time a call, chained and cold
# (`ci/gpu/kernel_gaps.py B S --fmt bfloat16 --chain [--set '{"PLAIN_PREFETCH_TILES": 0}']`,
# docs/h200/plain-prefetch/, 2026-12-01), none / 4 tiles ahead: B = 1, S = 2048: 23.2-23.6 /
# 20.9-21.0 µs; S = 8192: 32.8-33.3 / 29.0-29.2; S = 32768: 56.8-57.4 / 57.6-58.0; B = 8, S = 2048:
# 39.8-39.9 / 37.9-38.5. Those grids have 16-128 threadgroups. On 256 the hint cost 25-36%
# (docs/h200/tip-f77cc62/, none / 4 ahead: B = 2, S = 32768: 81.1-81.6 / 110.5-110.6; B = 16,
# S = 2048: 50.9-51.5 / 63.4-65.1), hence the limit; one-block launches were not measured with it
# and take none. 1-3 tiles ahead read within a sample's noise of 4 there, but for B = 1,
# S = 32768 (55.1-55.7 against 56.6-57.2). 8 and 16 ahead (docs/h200/prefetch-distance/, decode
# kernel chained, B = 1): S = 2048 18.0-19.1 against 17.6-17.7 µs, S = 32768 65.5-68.2 against
# 54.1-56.3.
PLAIN_PREFETCH_TILES = 4
PLAIN_PREFETCH_MAX_THREADGROUPS = 128
# The plain matrix kernel keeps ptxas' choice (229 registers, 8 warps an SM): 3 an SM (12 warps,
# 168 registers) spills 264 bytes and lost 20-26% at B = 8 and 32, S = 32768 (chained and cold,
# docs/h200/plain-mma/sweep-ab.log; again docs/h200/verified/sweep-plain-bounds.log, 2026-11-30).
PLAIN_MMA_THREADGROUPS_PER_SM = 0

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
    checkout = Path(__file__).resolve().parent.parent / "metal"
    if (checkout / KERNEL_FILES[0]).is_file():
        return checkout
    return resources.files("fusedattend.metal")


def read_kernel_file(name: str) -> str:
    return (kernel_dir() / name).read_text()


def on_metal() -> bool:
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
# as MLX writes template arguments, once per kernel object (_kernel): passed as `template` with
# each call, MLX converts and formats them on every call (the decode kernel's nine cost 1.5 µs of
# host time a call on the H200's machine, docs/h200/host/). Types by the compiler's names.
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


def kernel_sources(body_file: str, defines=(), launch_bounds=None, constants=(), compact=True, by_path=False):
    """(source, header) exactly as handed to mx.fast.{metal,cuda}_kernel on this platform.

    launch_bounds: (threads, threadgroups an SM) for CUDA's __launch_bounds__, or None.
    constants: the body's compile-time constants (constant_lines).
    compact=False: the files' text as it is (for ci/gpu/overhead.py's comparison).
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


# MLX's CUDA backend copies a kernel's whole source string into every call (custom_kernel.cpp's
# build_kernel), and its evaluation of the call costs more the longer that string is. NVRTC reads
# an #include from disk, so on CUDA each file goes by its path where it is a plain file there (an
# installed package is): about 0.9 KB a kernel instead of 28, the same text compiled. H200,
# B = 1, S = 2048, queued (docs/h200/journal.md, "The kernel files by path on CUDA", 2026-11-30): the
# decode kernel alone 12.7 against 30.7 µs a call, its host time 3.1 against 4.0; the public bf16
# call 24.8 against 47.1 µs. False hands the text itself (for comparisons).
CUDA_SOURCES_BY_PATH = os.environ.get("FUSEDATTEND_CUDA_SOURCES_BY_PATH", "1").strip() != "0"
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


@functools.lru_cache(maxsize=None)
def _kernel(name, input_names, output_names, body_file, defines=(), launch_bounds=None, constants=()):
    source, header = kernel_sources(body_file, defines, launch_bounds, constants)
    make = mx.fast.metal_kernel if on_metal() else mx.fast.cuda_kernel
    # MLX's CUDA backend keeps compiled kernels on disk by name alone (MLX_PTX_CACHE_DIR, by
    # default under the temp directory, per MLX version): a name that stayed the same when the
    # source changed would hand the next process an earlier version's build. So the name carries
    # a digest of the text compiled (the files' text, also where they go by path).
    digest = hashlib.sha256((header + source).encode()).hexdigest()[:12]
    by_path = kernel_sources(body_file, defines, launch_bounds, constants, by_path=True) if CUDA_SOURCES_BY_PATH else None
    if by_path is not None:
        source, header = by_path
    return make(
        name=f"{name}_{digest}",
        input_names=list(input_names),
        output_names=list(output_names),
        source=source,
        header=header,
        ensure_row_contiguous=False,  # K/V are read in place through their strides
    )


def block_keys(S: int, plain_matrix: bool = False) -> int:
    """Keys per split block: a function of S and the format only (never of B or NL), a power of two.

    Aims at TARGET_BLOCKS blocks per (request, kv head) so that one request fills the GPU,
    within [MIN_BLOCK, MAX_BLOCK] so that blocks amortise their merge. plain_matrix: plain K/V
    that the matrix kernel takes in long blocks (_uses_mma), which from PLAIN_LONG_BLOCKS_FROM_S
    keys on get MAX_BLOCK, and from PLAIN_LONGER_BLOCKS_FROM_S on PLAIN_LONGER_BLOCK.
    """
    if plain_matrix and S >= PLAIN_LONG_BLOCKS_FROM_S:
        return PLAIN_LONGER_BLOCK if S >= PLAIN_LONGER_BLOCKS_FROM_S else MAX_BLOCK
    want = max(1, math.ceil(S / TARGET_BLOCKS))
    return min(MAX_BLOCK, max(MIN_BLOCK, 1 << (want - 1).bit_length()))


def _plain_matrix(quantized, dtype, D) -> bool:
    """Whether plain K/V take the matrix kernel's long blocks once split (block_keys)."""
    return not quantized and _uses_mma(False, dtype, D, False, MAX_BLOCK)


def _split_blocks(S: int, plain_matrix: bool) -> tuple:
    """(keys of a block, blocks) of S keys split (S > SINGLE_PASS_MAX_S, or always where it is 0)."""
    block = block_keys(S, plain_matrix)
    return block, -(-S // block)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _placeholder(dtype):
    """An unread stand-in for an absent mask or key_ranges input (kernels take a fixed list)."""
    return mx.zeros((1, 1, 1, 1, 1) if dtype == mx.bool_ else (1, 2), dtype=dtype)


MASK_KINDS = {"none": 0, "causal": 1, "bool": 2, "additive": 3}


# MLX's CUDA allocator keeps arrays of at most 8 bytes in a small pool of managed memory advised
# read-mostly (mlx/backend/cuda/allocator.cpp), and a kernel's warps waited for a read of one
# there: with the softmax scale and 1.0 (8 bytes) in that pool the bf16 decode kernel took 17.78 /
# 52.90 / 35.38 µs at B = 1, S = 2048 / B = 1, S = 32768 / B = 8, S = 2048, padded to 16 bytes
# 15.04 / 44.08 / 25.30, the same bits (H200, docs/h200/scalar-pool/, 2026-12-01). So the
# constant inputs the kernels read are made at least this long; the padding is never read.
CONSTANT_INPUT_MIN_BYTES = 16


def _padded(values, itemsize):
    return values + (0,) * max(0, CONSTANT_INPUT_MIN_BYTES // itemsize - len(values))


@functools.lru_cache(maxsize=256)
def _int32s(*values):
    """A small constant input, made once per distinct value (building one costs host time), of
    at least CONSTANT_INPUT_MIN_BYTES."""
    return mx.array(_padded(values, 4), dtype=mx.int32)


@functools.lru_cache(maxsize=256)
def _float32s(*values):
    """_int32s' float32 counterpart."""
    return mx.array(_padded(values, 4), dtype=mx.float32)


def _uses_mma(quantized, dtype, D, single_pass, block) -> bool:
    """Whether a problem takes decode_mma.metal (`block`: keys of a split block)."""
    if dtype not in (mx.float16, mx.bfloat16) or D > MMA_MAX_D:
        return False
    if quantized:
        return QUANTIZED_MMA
    return PLAIN_MMA and D % PLAIN_MMA_D_MULTIPLE == 0 and (single_pass or block >= PLAIN_MMA_MIN_BLOCK)


def score_mantissa(dtype, bits, group_size) -> int:
    """The matrix kernel's SCORE_MANTISSA: the query type's mantissa bits where its scores take
    16-bit operands (a code 1 + c / 2^bits exact in that type, and a lane's GS / 4 codes of a
    group whole 32-bit words), else 0 (32-bit operands: tf32 on NVIDIA)."""
    mantissa = 10 if dtype == mx.float16 else 7
    return mantissa if SCORES16 and bits <= mantissa and group_size * bits >= 128 else 0


def out_mantissa(bits) -> int:
    """The quantized matrix kernel's OUT_MANTISSA: bf16's mantissa bits where its output's V codes
    take 16-bit operands (a code 1 + c / 2^bits exact in bf16), else 0 (32-bit operands)."""
    return 7 if OUT16 and bits <= 7 else 0


def plain_weight_scale_log2(dtype) -> int:
    """The matrix kernel's WEIGHT_SCALE_LOG2 over plain K/V: its output weights (at most 1) enter
    the products as two parts in the K/V type, and in f16 (smallest step 2^-24) scaled by 2^14
    so that small weights keep their bits; bf16 has float's range."""
    return 14 if dtype == mx.float16 else 0


class Launch(NamedTuple):
    """A problem's launches, from what they depend on: everything but the arrays."""

    name: str  # MLX caches a compiled kernel by name only (_kernel appends a digest of the text)
    body_file: str
    single_pass: bool  # one block: the decode kernel writes the output, no merge
    input_names: tuple
    output_names: tuple
    defines: tuple
    constants: tuple  # the body's compile-time constants (constant_lines)
    launch_bounds: Optional[tuple]  # (threads, threadgroups an SM), CUDA only
    dims: mx.array
    kernel_args: dict  # grid, threadgroup, output_shapes, output_dtypes
    merge_constants: Optional[tuple]  # the same for merge_partials.metal, when S is split
    merge_args: Optional[dict]


PLAIN_INPUTS = ("q", "k", "v")
QUANTIZED_INPUTS = ("q", "k_codes", "k_scales", "k_biases", "v_codes", "v_scales", "v_biases")
COMMON_INPUTS = ("mask", "key_ranges", "dims", "scalars")


# Marks key_schedule's key for every S of one block: a single launch's Launch is the same for each
# S (its dims hold SINGLE_PASS_MAX_S, a bound of at least S; the kernels take S from K/V's shape).
ONE_BLOCK = "one block"


def key_schedule(S: int, plain_matrix: bool):
    """All that the launches take of S: while one block holds all S keys, only the bound that
    block is made for, (ONE_BLOCK, SINGLE_PASS_MAX_S); else the blocks' size and count. The bound
    is in the key so that a Launch made under another SINGLE_PASS_MAX_S is never taken for it."""
    return (ONE_BLOCK, SINGLE_PASS_MAX_S) if S <= SINGLE_PASS_MAX_S else _split_blocks(S, plain_matrix)


def _schedule(shape, dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype, has_ranges, group_size,
              layered) -> Launch:
    """The launches of a problem: those of its schedule (key_schedule), made once for every S
    that shares it, as a decode loop's growing cache does step after step."""
    NL, B, H_q, H_kv, L, S, D = shape
    keys = key_schedule(S, _plain_matrix(quantized, dtype, D))
    return _schedule_launch((NL, B, H_q, H_kv, L, D), dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype,
                            has_ranges, group_size, keys, layered)


@functools.lru_cache(maxsize=1024)
def _schedule_launch(heads, dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype, has_ranges, group_size,
                     keys, layered) -> Launch:
    """_schedule's Launch of one schedule (`keys`: key_schedule's). The output takes the caller's
    form: with the layer axis only when the caller passed it (`layered`)."""
    NL, B, H_q, H_kv, L, D = heads
    out_shape = (NL, B, H_q, L, D) if layered else (B, H_q, L, D)
    N = NL * B
    G = H_q // H_kv
    single_pass = keys[0] == ONE_BLOCK
    # One launch's block is all S keys, which any bound of at least S gives the kernels: one
    # dims for every S a decode loop's single launches take, not an array made each step (a
    # host-made array each step costs a loop: docs/h200/host-arrays/).
    block, NB = (keys[1], 1) if single_pass else keys
    mma = _uses_mma(quantized, dtype, D, single_pass, block)
    if single_pass:
        simdgroups = SINGLE_PASS_SIMDGROUPS
    elif mma:
        simdgroups = QUANTIZED_MMA_SIMDGROUPS if quantized else PLAIN_MMA_SIMDGROUPS
    else:
        simdgroups = SIMDGROUPS
    threads = simdgroups * SIMD_WIDTH
    if mma:
        body_file = "decode_mma.metal"
        constants = [("T", dtype), ("D", D), ("NSG", simdgroups), ("MASK", MASK_KINDS[mask_kind]), ("MT", mask_dtype),
                     ("LAYERED", layered), ("OFFSETS32", MMA_OFFSETS32)]
        if quantized:
            name = "fa_quantized_decode_mma"
            bounded = (not single_pass and bits <= QUANTIZED_MMA_BOUNDED_MAX_BITS
                       and D // group_size <= QUANTIZED_MMA_BOUNDED_MAX_GROUPS)
            short = not single_pass and block <= QUANTIZED_SHORT_BLOCK
            per_sm = QUANTIZED_SHORT_BLOCK_THREADGROUPS_PER_SM if short else QUANTIZED_MMA_THREADGROUPS_PER_SM
            per_sm = per_sm if bounded else 0
            stages = quantized_stages(single_pass, short, D, bits, group_size, scales_dtype)
            constants += [("GS", group_size), ("BITS", bits), ("ST", scales_dtype),
                          ("SCORE_MANTISSA", score_mantissa(dtype, bits, group_size)),
                          ("OUT_MANTISSA", out_mantissa(bits)), ("OT", mx.bfloat16),
                          ("PREFETCH_TILES", QUANTIZED_SHORT_BLOCK_PREFETCH_TILES if short and not stages else 0),
                          ("STAGES", stages)]
        tiles = math.ceil(G * L / MMA_ROWS)
        if not quantized:
            name, per_sm = "fa_decode_mma", PLAIN_MMA_THREADGROUPS_PER_SM
            small_grid = not single_pass and NB * H_kv * tiles * N <= PLAIN_PREFETCH_MAX_THREADGROUPS
            constants += [("WEIGHT_SCALE_LOG2", plain_weight_scale_log2(dtype)),
                          ("PREFETCH_TILES", PLAIN_PREFETCH_TILES if small_grid else 0)]
    else:
        name = "fa_quantized_decode_attention" if quantized else "fa_decode_attention"
        body_file = "decode_attention.metal"
        per_sm = 0 if quantized or single_pass else SPLIT_THREADGROUPS_PER_SM
        rows = min(_pow2_at_least(G * L), MAX_ROWS)
        # E: at least D / 32 (a key's lanes fit in a simdgroup); fewer elements when many rows
        # share the registers, fewer rows when D forces many elements.
        min_elements = _pow2_at_least(math.ceil(D / SIMD_WIDTH))
        elements = max(min_elements, min(ELEMENTS_PER_LANE, MAX_ROW_ELEMENTS // rows))
        rows = max(1, min(rows, MAX_ROW_ELEMENTS // elements))
        tiles = math.ceil(G * L / rows)
        if quantized:
            keys_in_flight = QUANTIZED_KEYS_IN_FLIGHT
        else:  # U: keys each lane loads (K and V) before using any of them
            key_bytes = SINGLE_PASS_KEY_BYTES_IN_FLIGHT if single_pass else KEY_BYTES_IN_FLIGHT
            keys_in_flight = max(1, min(MAX_KEYS_IN_FLIGHT, key_bytes // (elements * dtype.size)))
        constants = [("T", dtype), ("D", D), ("E", elements), ("ROWS", rows), ("U", keys_in_flight),
                     ("NSG", simdgroups), ("MASK", MASK_KINDS[mask_kind]), ("MT", mask_dtype), ("LAYERED", layered)]
        if quantized:
            constants += [("BITS", bits), ("ST", scales_dtype)]
    if single_pass:
        name += "_single_pass"
        outputs = dict(output_shapes=[out_shape], output_dtypes=[dtype])
        merge_constants = merge_args = None
    else:
        outputs = dict(output_shapes=[(N, H_q, L, NB, D), (N, H_q, L, NB, 2)],
                       output_dtypes=[mx.float32, mx.float32])
        merge_threads = math.ceil(D / SIMD_WIDTH) * SIMD_WIDTH  # whole simdgroups: it shuffles
        merge_constants = (("T", dtype), ("D", D))
        merge_args = dict(grid=(N * H_q * L * merge_threads, 1, 1),
                          threadgroup=(merge_threads, 1, 1), output_shapes=[out_shape], output_dtypes=[dtype])
    if per_sm:
        name += f"_{per_sm}_per_sm"
    defines = (("FA_QUANTIZED", int(quantized)), ("FA_SINGLE_PASS", int(single_pass)))
    return Launch(
        name=name,
        body_file=body_file,
        single_pass=single_pass,
        input_names=(QUANTIZED_INPUTS if quantized else PLAIN_INPUTS) + COMMON_INPUTS,
        output_names=("out",) if single_pass else ("out_partial", "stats_partial"),
        defines=defines,
        constants=tuple(constants),
        launch_bounds=(threads, per_sm) if per_sm else None,
        dims=_int32s(L, G, block, int(has_ranges), group_size or 0),
        kernel_args=dict(grid=(NB * threads, H_kv * tiles, N), threadgroup=(threads, 1, 1), **outputs),
        merge_constants=merge_constants,
        merge_args=merge_args,
    )


def _launch_inputs(problem: Problem, quantized: bool, shape):
    """The problem's Launch and the decode kernel's inputs, in Launch.input_names' order.

    Queries, keys and values go to the kernel as the caller passed them (4-D, or 5-D when layered;
    any strides): no copy, no new array."""
    launch, inputs_of = _launch_common(problem, quantized, shape)
    return launch, inputs_of(problem.arrays)


def _launch_common(problem: Problem, quantized: bool, shape):
    """The problem's Launch, and the function that makes the decode kernel's inputs from the
    caller's arrays (`Problem.arrays`, or a repeated call's of the same shapes and dtypes)."""
    NL, B, H_q, H_kv, L, S, D = shape
    kind = problem.mask.kind
    if kind in ("bool", "additive"):
        mask = mx.broadcast_to(problem.mask.array, (NL, B, H_q, L, S))  # stride-0 view, no copy
    else:
        mask = _placeholder(mx.bool_)
    q, k, ranges = problem.q, problem.k, problem.key_ranges
    scales_dtype = k.scales.dtype if quantized else None
    launch = _schedule(shape, q.dtype, quantized, kind, mask.dtype, problem.bits, scales_dtype,
                       ranges is not None, problem.group_size, problem.layered)
    # 1.0 is read at run time by the kernels' code reading (fa_code_unit in decode_attention.h).
    constants = (launch.dims, _float32s(problem.scale, 1.0))
    no_ranges = () if ranges is not None else (_placeholder(mx.int32),)
    arrays = problem.arrays
    kv_end = len(arrays) - (ranges is not None)  # key_ranges, where given, follow q and K/V
    # biases and v's scales in k's scales dtype: ST names the one variant
    casts = tuple(i for i in (3, 5, 6) if arrays[i].dtype != scales_dtype) if quantized else ()

    def inputs_of(arrays):
        inputs = [*arrays[:kv_end], mask, *arrays[kv_end:], *no_ranges, *constants]
        for i in casts:
            inputs[i] = inputs[i].astype(scales_dtype)
        return inputs

    return launch, inputs_of


def decode_launch(problem: Problem, quantized: bool) -> dict:
    """The decode kernel's launch in full (for tools and tests): its Launch fields, and the
    arguments of the kernel call (inputs, grid, threadgroup, outputs) as `call`."""
    launch, inputs = _launch_inputs(problem, quantized, problem.shape)
    described = launch._asdict()
    described["call"] = dict(inputs=inputs, **described.pop("kernel_args"))
    return described


def launcher(problem: Problem, quantized: bool):
    """The function of the caller's arrays (`Problem.arrays`) that launches the problem's kernels,
    everything else fixed. It takes any arrays of the problem's shapes and dtypes. Returns the
    output in the caller's form: (B, H_q, L, D), or (NL, B, H_q, L, D) for a layered call. None
    where the grid would pass CUDA's limit."""
    shape = problem.shape
    if shape[0] * shape[1] > MAX_GRID_Z:
        return None
    launch, inputs_of = _launch_common(problem, quantized, shape)
    decode = _kernel(launch.name, launch.input_names, launch.output_names, launch.body_file, launch.defines,
                     launch.launch_bounds, launch.constants)
    kernel_args = launch.kernel_args
    if launch.single_pass:
        def launch_single(*arrays):
            return decode(inputs=inputs_of(arrays), **kernel_args)[0]

        return launch_single
    merge = _kernel("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal",
                    constants=launch.merge_constants)
    merge_args = launch.merge_args

    def launch_split(*arrays):
        return merge(inputs=decode(inputs=inputs_of(arrays), **kernel_args), **merge_args)[0]

    return launch_split


# A replayer keeps the launchers of this many schedules (key_schedule) at most: a decode loop's S
# grows a key a step and changes schedule every block of keys once split (up to SINGLE_PASS_MAX_S
# one launcher serves every S).
LAUNCHERS_KEPT = 64


def replayer(problem: Problem, quantized: bool):
    """launcher's function for calls that repeat this one's signature (backends.replay): any
    arrays of the problem's shapes and dtypes but for the keys' length S (axis -2 of K/V), which
    a decode loop's cache grows by one every step. Another S takes the launcher of its schedule
    (key_schedule), made once. None where launcher is None."""
    first = launcher(problem, quantized)
    if first is None:
        return None
    S, D = problem.shape[5], problem.shape[6]
    plain_matrix = _plain_matrix(quantized, problem.q.dtype, D)
    template = problem._replace(q=None, k=None, v=None, key_ranges=None)  # keeps no array of the caller's

    launchers = {key_schedule(S, plain_matrix): first}
    last = [S, first]  # the last call's S and launcher

    def replay(*arrays):
        S = arrays[1].shape[-2]
        if S != last[0]:
            key = key_schedule(S, plain_matrix)
            launch = launchers.get(key)
            if launch is None:
                if len(launchers) >= LAUNCHERS_KEPT:
                    launchers.clear()
                launch = launchers[key] = launcher(template.with_arrays(arrays), quantized)
            last[:] = S, launch
        return last[1](*arrays)

    return replay


def clear_caches():
    """Forget schedules and replayed launchers: after changing this module's constants or
    `_kernel` (tests, sweeps), which they were made with."""
    _schedule_launch.cache_clear()
    backends.forget_replays()


def set_constants(values: dict) -> dict:
    """Set schedule constants of this module by name (tests, sweeps; probes also set its
    functions so; an unknown name is an AttributeError) and forget what was made with the old
    ones. Returns the old values."""
    for name in values:
        if name not in globals():
            raise AttributeError(f"fusedattend.gpu has no constant {name!r}")
    old = {name: globals()[name] for name in values}
    globals().update(values)
    clear_caches()
    return old


def _attend(problem: Problem, quantized: bool) -> mx.array:
    launch = launcher(problem, quantized)
    if launch is None:
        from . import reference

        return (reference.quantized_decode_attention if quantized else reference.decode_attention)(problem)
    return launch(*problem.arrays)


def decode_attention(problem: Problem) -> mx.array:
    return _attend(problem, quantized=False)


def quantized_decode_attention(problem: Problem) -> mx.array:
    return _attend(problem, quantized=True)
