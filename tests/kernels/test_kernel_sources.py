"""Every GPU kernel comes from metal/, and its CUDA form compiles (nvcc, where present).

The CUDA path must not carry a kernel of its own: fusedattend/gpu hands mx.fast.cuda_kernel the same
metal/*.metal bodies that mx.fast.metal_kernel gets, behind metal/cuda_compat.h.
"""

import functools
import re
from pathlib import Path

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend import gpu
from fusedattend._problem import plain_problem, quantized_problem
from fusedattend.gpu import launch as gpu_launch, schedule, sources
from tests.kernels import nvcc_wrap
from tests.kernels.policy_override import policy_override

DEFAULT = schedule.Policy()  # the shipped schedule

ROOT = Path(__file__).resolve().parents[2]
CUDA_ONLY_MARKERS = ("__global__", "__shfl", "threadIdx", "blockIdx")


def test_kernel_files_live_in_metal_dir():
    for name in sources.KERNEL_FILES + sources.HEADER_FILES + (sources.CUDA_COMPAT,):
        assert (ROOT / "metal" / name).is_file(), name


def test_metal_bodies_hold_no_cuda():
    for name in sources.KERNEL_FILES + sources.HEADER_FILES:
        text = (ROOT / "metal" / name).read_text()
        for marker in CUDA_ONLY_MARKERS:
            assert marker not in text, f"{name} uses CUDA's {marker}"


def test_python_side_holds_no_kernel_code():
    """gpu/sources.py may only name Metal's thread variables from CUDA's, nothing more."""
    for path in (ROOT / "fusedattend").rglob("*.py"):
        text = path.read_text()
        if path.name == "sources.py":
            text = text.replace(sources.CUDA_THREAD_ATTRIBUTES, "")
        for marker in ("__global__", "__shfl", "__syncthreads", "simd_sum(", "threadgroup float"):
            assert marker not in text, f"{path.name} holds kernel code ({marker})"


def test_compat_header_is_small():
    """Small enough to review by eye: about 120 lines of names, helpers (byte permutes, pinned
    row pointers, prefetches and cp.async copies among them) and launch bounds, and 85 that map
    simdgroup matrix products to mma.sync (tf32 and 16-bit operands, accumulators as B operands, a
    float B as parts)."""
    lines = [l for l in (ROOT / "metal" / sources.CUDA_COMPAT).read_text().splitlines() if l.strip()]
    assert len(lines) <= 210


def test_sources_reach_mlx_compacted():
    """sources.kernel_sources drops comments, indentation and blank lines (MLX copies the whole text
    into every call) and nothing else: every code line of the files is there, in order."""
    cases = [("decode_attention.metal", (("FA_QUANTIZED", 1), ("FA_SINGLE_PASS", 0)), (128, 4)),
             ("decode_mma.metal", (("FA_QUANTIZED", 0), ("FA_SINGLE_PASS", 1)), None),
             ("merge_partials.metal", (), None), ("merge_partials.metal", (("FA_MERGE_WINDOW", 1),), None)]
    for body_file, defines, bounds in cases:
        source, header = sources.kernel_sources(body_file, defines, bounds)
        assert "//" not in source + header
        files = ([] if sources.on_metal() else [sources.CUDA_COMPAT]) + [*sources.HEADER_FILES, body_file]
        code = [line.split("//")[0].strip() for name in files for line in sources.read_kernel_file(name).splitlines()]
        sent = (header + source).splitlines()
        it = iter(sent)
        assert all(any(line == got for got in it) for line in code if line), body_file
        assert len(header + source) < 0.7 * sum(len(sources.read_kernel_file(name)) for name in files)
    assert sources.compact_source("#define A(x) x \\\n\n  y // z\n  // only a comment\n\nw\n") == \
        "#define A(x) x \\\n\ny\nw\n"  # the blank line that ends the macro stays


def test_kernel_name_follows_the_source(monkeypatch):
    """MLX keeps compiled CUDA kernels on disk by name alone, across processes: the name handed
    to mx.fast.cuda_kernel changes with the text compiled, so an edited kernel is never served
    an earlier build."""
    names = []
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **kwargs: names.append(kwargs["name"]))
    read = sources.read_kernel_file
    args = ("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal")
    gpu_launch._kernel.cache_clear()
    try:
        gpu_launch._kernel(*args)
        gpu_launch._kernel(*args, defines=(("FA_SINGLE_PASS", 1),))
        monkeypatch.setattr(sources, "read_kernel_file", lambda name: read(name) + "\nconstexpr int edited = 1;\n")
        gpu_launch._kernel.cache_clear()
        gpu_launch._kernel(*args)
    finally:
        gpu_launch._kernel.cache_clear()
    assert all(re.fullmatch(r"fa_merge_partials_[0-9a-f]{12}", name) for name in names), names
    assert len(set(names)) == 3, names


def test_constants_open_the_body(monkeypatch):
    """A kernel's compile-time constants are written into its body as MLX writes template
    arguments (constexpr / using lines, the platform's type names) and never passed with a call,
    where MLX would convert and format them again each time."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    constants = (("T", mx.bfloat16), ("D", 128), ("OFFSETS32", True), ("ST", mx.float16))
    source, _ = sources.kernel_sources("merge_partials.metal", constants=constants)
    assert source.startswith("\nusing T = __nv_bfloat16;\nconstexpr int D = 128;\nconstexpr bool OFFSETS32 = true;\n"
                             "using ST = __half;\n")
    monkeypatch.setattr(sources, "on_metal", lambda: True)
    assert sources.kernel_sources("merge_partials.metal", constants=constants)[0].startswith("\nusing T = bfloat16_t;\n")
    with policy_override(single_pass_max_s=0):  # split: the merge launch too
        launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, 128, 4, 1, 8, 2), quantized=True)
    assert "template" not in launch["call"] and ("BITS", 4) in launch["constants"]
    assert "template" not in launch["merge_args"] and launch["merge_constants"] == (("T", mx.bfloat16), ("D", 128))


@pytest.mark.parametrize("quantized", [False, True])
def test_arrays_reach_the_kernels_as_passed(quantized):
    """The decode kernel's inputs are the caller's arrays themselves, 4-D or 5-D (the kernels read
    either: LAYERED), not new arrays with a layer axis added: each would be an MLX op of host
    time on every call. The other backends add the axis themselves (Problem.with_layer_axis)."""
    for layered in (False, True):
        lead = (2,) if layered else ()
        q = mx.zeros(lead + (1, 8, 1, 64), dtype=mx.bfloat16)
        k = mx.zeros(lead + (1, 2, 40, 64), dtype=mx.bfloat16)
        if quantized:
            kq = fa.quantize_kv(k, bits=4, group_size=32)
            launch = gpu.decode_launch(quantized_problem(q, kq, kq, None, None, None, 4, 32), quantized=True)
            passed = [q, *kq, *kq]
        else:
            launch = gpu.decode_launch(plain_problem(q, k, k, None, None, None), quantized=False)
            passed = [q, k, k]
        inputs = launch["call"]["inputs"]
        assert all(got is want for got, want in zip(inputs, passed)), layered
        assert ("LAYERED", layered) in launch["constants"]
        assert launch["single_pass"] and launch["call"]["output_shapes"] == [q.shape]  # the caller's form


# Problems that cover every branch of the bodies (not the full product of variants).
CASES = [
    # quantized, dtype, mask, D, bits, L, H_q, H_kv
    (False, mx.bfloat16, None, 128, None, 1, 8, 2),  # decode_mma.metal from here
    (False, mx.float16, "additive", 96, None, 3, 16, 2),
    (False, mx.bfloat16, "causal", 32, None, 2, 4, 4),
    (False, mx.float16, "bool", 80, None, 3, 4, 4),  # decode_attention.metal from here
    (False, mx.float32, "additive", 256, None, 8, 32, 1),
    (True, mx.bfloat16, "causal", 128, 4, 2, 8, 2),
    (True, mx.float16, "additive", 64, 2, 1, 8, 8),
    (True, mx.float32, "bool", 256, 8, 1, 4, 2),
    (True, mx.bfloat16, "bool", 96, 8, 3, 16, 2),
    (True, mx.float16, "causal", 64, 8, 2, 8, 4),
]


def _problem(quantized, dtype, mask, D, bits, L, H_q, H_kv, group_size=32, S=40):
    q = mx.zeros((1, H_q, L, D), dtype=dtype)
    k = mx.zeros((1, H_kv, S, D), dtype=dtype)
    if mask == "bool":
        mask = mx.ones((L, S), dtype=mx.bool_)
    elif mask == "additive":
        mask = mx.zeros((L, S), dtype=dtype)
    if quantized:
        kq = fa.quantize_kv(k, bits=bits, group_size=group_size)
        return quantized_problem(q, kq, kq, None, mask, mx.array([[0, S]]), bits, group_size)
    return plain_problem(q, k, k, None, mask, None)


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("single_pass", [False, True], ids=["two_launches", "single_pass"])
@pytest.mark.parametrize("case", CASES)
def test_cuda_form_of_decode_kernel_compiles(monkeypatch, case, single_pass):
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    policy = schedule.Policy(single_pass_max_s=4096 if single_pass else 0)
    launch = gpu.decode_launch(_problem(*case), quantized=case[0], policy=policy)
    ok, log = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch))
    assert ok, log


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("quantized, body_file", [(False, "decode_attention.metal"), (False, "decode_mma.metal"),
                                                   (True, "decode_mma.metal")], ids=["bf16", "bf16_mma", "q4_mma"])
@pytest.mark.parametrize("per_sm", [3, 4])
def test_launch_bounds_cap_registers(monkeypatch, quantized, body_file, per_sm):
    """Threadgroups an SM asked of a split launch reach ptxas: the kernel fits that many (plain
    K/V on either kernel: the matrix kernel's blocks of at least plain_mma_min_block keys lowered
    to the problem's one block)."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    plain_mma = body_file == "decode_mma.metal"
    capped = dict(split_threadgroups_per_sm=per_sm, quantized_mma_threadgroups_per_sm=per_sm,
                  quantized_short_block_threadgroups_per_sm=per_sm, plain_mma_threadgroups_per_sm=per_sm)
    with policy_override(single_pass_max_s=0, plain_mma_min_block=0 if plain_mma else DEFAULT.plain_mma_min_block,
                         **capped):
        launch = gpu.decode_launch(_problem(quantized, mx.bfloat16, None, 128, 4, 1, 32, 8, group_size=64),
                                   quantized=quantized)
    assert launch["body_file"] == body_file
    threads = launch["call"]["threadgroup"][0]
    assert launch["launch_bounds"] == (threads, per_sm) and launch["name"].endswith(f"_{per_sm}_per_sm")
    ok, log = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), options=("-Xptxas", "-v"))
    assert ok, log
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert registers <= 65536 // (threads * per_sm)


@pytest.mark.parametrize("short", [False, True], ids=["long_block", "short_block"])
@pytest.mark.parametrize("bits, group_size, D, single_pass, bounded", [
    (4, 64, 128, False, True), (4, 128, 128, False, True), (2, 64, 128, False, True), (4, 64, 64, False, True),
    (8, 128, 128, False, False), (4, 32, 128, False, False), (2, 32, 128, False, False), (4, 64, 128, True, False)])
def test_quantized_matrix_kernel_bounded_where_its_registers_allow(monkeypatch, bits, group_size, D, single_pass,
                                                                    bounded, short):
    """DEFAULT.quantized_mma_threadgroups_per_sm caps split blocks of at most 4 bits and 2 groups a row,
    DEFAULT.quantized_short_block_threadgroups_per_sm short ones; ptxas spills little there (nvcc 13.0:
    0-40 bytes at 6 an SM, 104-156 at 8, staged or not) and much at 8 bits or 4 groups."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    # (the problem's 40 keys: one block of DEFAULT.min_block keys)
    with policy_override(single_pass_max_s=4096 if single_pass else 0,
                         quantized_short_block=DEFAULT.max_block if short else 0):
        launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, D, bits, 1, 32, 8, group_size=group_size),
                                   quantized=True)
    assert launch["name"].startswith("fa_quantized_decode_mma")
    threads = launch["call"]["threadgroup"][0]
    per_sm = DEFAULT.quantized_short_block_threadgroups_per_sm if short else DEFAULT.quantized_mma_threadgroups_per_sm
    assert launch["launch_bounds"] == ((threads, per_sm) if bounded else None)
    if bounded and nvcc_wrap.nvcc_available():
        ok, log = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), options=("-Xptxas", "-v"))
        assert ok, log
        spilled = int(re.search(r"(\d+) bytes spill stores", log).group(1))
        assert spilled <= (192 if short else 64), log


@pytest.mark.parametrize("group_size", [64, 128], ids=["stageable", "scales_under_4_bytes"])
@pytest.mark.parametrize("S, short", [(40, True), (16384, True), (16385, False), (32768, False)])
def test_quantized_split_blocks_stage_or_prefetch(monkeypatch, S, short, group_size):
    """Split blocks on CUDA stage their tiles through threadgroup memory (decode_mma.metal's
    STAGES: the PTX holds cp.async, cuda_compat.h's fa_copy_async) where a key's scales of an
    array are 4, 8 or 16 bytes (group size 64: two bf16 groups; 128: one, 2 bytes). Blocks of at
    most DEFAULT.quantized_short_block keys (a function of S alone, as the block is) that cannot stage
    ask their tiles ahead into L2 instead (prefetch.global.L2, fa_prefetch); longer ones neither."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    assert (schedule.block_keys(S) <= DEFAULT.quantized_short_block) == short
    with policy_override(single_pass_max_s=0):
        launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, 128, 4, 1, 32, 8, group_size=group_size, S=S),
                                   quantized=True)
    constants = dict(launch["constants"])
    stages = (DEFAULT.quantized_short_block_stages if short else DEFAULT.quantized_stages) if group_size == 64 else 0
    prefetch = DEFAULT.quantized_short_block_prefetch_tiles if short and not stages else 0
    assert (constants["STAGES"], constants["PREFETCH_TILES"]) == (stages, prefetch)
    if nvcc_wrap.nvcc_available():
        ok, log, ptx = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), ptx=True)
        assert ok, log
        assert ("cp.async.cg.shared.global" in ptx, "prefetch.global.L2" in ptx) == (bool(stages), bool(prefetch))


@pytest.mark.parametrize("B, S, small", [(1, 2048, True), (1, 8192, True), (1, 32768, True), (8, 2048, True),
                                         (1, 40, False), (32, 2048, False), (8, 32768, False)])
def test_plain_prefetch_on_small_grids(monkeypatch, B, S, small):
    """Plain K/V's split launches on the matrix kernel ask each simdgroup's tiles
    DEFAULT.plain_prefetch_tiles ahead into L2 (prefetch.global.L2 in the PTX) where the launch has at
    most DEFAULT.plain_prefetch_max_threadgroups threadgroups: by the grid, so by B too, which a hint
    may be (test_gpu_schedule.py's test_plain_prefetch_is_bit_identical_to_none); larger grids
    and one block (S = 40) none."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    q = mx.zeros((B, 32, 1, 128), dtype=mx.bfloat16)
    k = mx.zeros((B, 8, S, 128), dtype=mx.bfloat16)
    launch = gpu.decode_launch(plain_problem(q, k, k, None, None, None), quantized=False)
    assert launch["body_file"] == "decode_mma.metal"
    grid, threads = launch["call"]["grid"], launch["call"]["threadgroup"][0]
    split = S > DEFAULT.single_pass_max_s
    assert (split and grid[0] // threads * grid[1] * grid[2] <= DEFAULT.plain_prefetch_max_threadgroups) == small
    assert dict(launch["constants"])["PREFETCH_TILES"] == (DEFAULT.plain_prefetch_tiles if small else 0)
    if nvcc_wrap.nvcc_available() and S == 2048:
        ok, log, ptx = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), ptx=True)
        assert ok, log
        assert ("prefetch.global.L2" in ptx) == small


def test_quantized_stages_policy(monkeypatch):
    """schedule.quantized_stages: split launches only, on CUDA (Apple's copies are plain loads and
    stores, not measured: only with Policy.stage_on_metal, as the CPU emulation sets it), where a
    key's codes are whole 16-byte pieces and its scales of an array 4, 8 or 16 bytes."""
    def stages(D, bits, group_size, scales_dtype=mx.bfloat16, *, single_pass=False, short=False):
        return schedule.quantized_stages(D, bits, group_size, scales_dtype, single_pass=single_pass, short=short,
                                         on_metal=sources.on_metal())

    monkeypatch.setattr(sources, "on_metal", lambda: False)
    long_stages = stages(128, 4, 64)
    assert long_stages == DEFAULT.quantized_stages > 0
    assert stages(128, 4, 64, short=True) == DEFAULT.quantized_short_block_stages
    assert stages(128, 4, 64, single_pass=True) == 0  # one block
    assert stages(96, 2, 32) == 0  # 6 code words a key
    assert stages(128, 8, 32) == long_stages  # 8-byte scale rows
    assert stages(256, 4, 32) == long_stages  # 16-byte scale rows
    assert stages(128, 4, 128) == 0  # 2 bytes
    assert stages(256, 4, 32, mx.float32) == 0  # 32 bytes
    monkeypatch.setattr(sources, "on_metal", lambda: True)
    assert stages(128, 4, 64) == 0
    with policy_override(stage_on_metal=True):
        assert stages(128, 4, 64) == long_stages


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_matrix_kernel_loads_are_global(monkeypatch, bits):
    """The row pointers decode_mma.metal holds whole (cuda_compat.h's fa_pin, an empty asm) keep
    their address space: every load of codes, scales and biases is ld.global (ld.shared where the
    tiles are staged through threadgroup memory), none generic (which the asm alone would make
    them, and slower to issue)."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, 128, bits, 1, 32, 8, group_size=64), quantized=True,
                               policy=schedule.Policy(single_pass_max_s=0))
    assert launch["name"].startswith("fa_quantized_decode_mma")
    ok, log, ptx = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), ptx=True)
    assert ok, log
    loads = re.findall(r"\bld\.[a-z0-9.]+", ptx)
    generic = sorted({l for l in loads if not l.startswith(("ld.global", "ld.shared", "ld.param", "ld.local"))})
    assert "ld.global.u32" in loads and not generic, generic


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("window", [False, True], ids=["one_launch", "with_window"])
def test_cuda_form_of_merge_kernel_compiles(monkeypatch, dtype, window):
    """The merge of one launch's blocks, and (FA_MERGE_WINDOW) of a quantized launch's then a window's."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    defines = (("FA_MERGE_WINDOW", 1),) if window else ()
    source, header = sources.kernel_sources("merge_partials.metal", defines, constants=(("T", dtype), ("D", 128)))
    inputs = ["out_partial", "stats_partial"] + (["out_window", "stats_window"] if window else [])
    text = nvcc_wrap.wrap("fa_merge", source, header, [(name, mx.float32) for name in inputs], [("out", dtype)])
    ok, log = nvcc_wrap.compile_cuda(text)
    assert ok, log


def test_kernel_choice(monkeypatch):
    """f16 / bf16 queries with D <= 128 (plain K/V: D a multiple of 32 too) take the
    simdgroup-matrix kernel; f32 queries, D > 128, plain D = 80, and any D above
    Policy.quantized_mma_max_d / plain_mma_max_d (0 routes that format away from it) the other."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)

    def body(quantized, dtype, D):
        return gpu.decode_launch(_problem(quantized, dtype, None, D, 4, 1, 8, 2), quantized=quantized)["body_file"]

    for quantized in (True, False):
        assert body(quantized, mx.bfloat16, 128) == body(quantized, mx.float16, 64) == "decode_mma.metal"
        assert body(quantized, mx.float32, 128) == body(quantized, mx.bfloat16, 256) == "decode_attention.metal"
    assert body(False, mx.bfloat16, 32) == "decode_mma.metal"
    assert body(False, mx.bfloat16, 80) == body(False, mx.float16, 48) == "decode_attention.metal"
    with policy_override(quantized_mma_max_d=0):
        assert body(True, mx.bfloat16, 128) == "decode_attention.metal"
        assert body(False, mx.bfloat16, 128) == "decode_mma.metal"
    with policy_override(plain_mma_max_d=0):
        assert body(False, mx.bfloat16, 128) == "decode_attention.metal"
        assert body(True, mx.bfloat16, 128) == "decode_mma.metal"
    with policy_override(quantized_mma_max_d=64, plain_mma_max_d=64):
        assert body(True, mx.bfloat16, 64) == body(False, mx.bfloat16, 64) == "decode_mma.metal"
        assert body(True, mx.bfloat16, 128) == body(False, mx.bfloat16, 128) == "decode_attention.metal"


def test_score_operand_choice():
    """The matrix kernel's scores take 16-bit operands (SCORE_MANTISSA: the query type's mantissa)
    where a code 1 + c / 2^bits is exact in the query type and a lane's GS / 4 codes of a group
    are whole 32-bit words; 32-bit operands otherwise (a function of the formats alone)."""
    assert schedule.score_mantissa(mx.bfloat16, 4, 32) == schedule.score_mantissa(mx.bfloat16, 2, 64) == 7
    assert schedule.score_mantissa(mx.float16, 8, 32) == schedule.score_mantissa(mx.float16, 4, 128) == 10
    assert schedule.score_mantissa(mx.bfloat16, 8, 64) == 0  # 8 bits do not fit bf16's 7
    assert schedule.score_mantissa(mx.float16, 2, 32) == 0  # 16 bits of a group a lane
    launch = gpu.decode_launch(_problem(True, mx.float16, None, 64, 8, 1, 8, 2), quantized=True)
    assert ("SCORE_MANTISSA", 10) in launch["constants"]
    launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, 64, 8, 1, 8, 2), quantized=True)
    assert ("SCORE_MANTISSA", 0) in launch["constants"]


def test_output_operand_choice():
    """The quantized matrix kernel's output takes 16-bit operands in bf16 (OUT_MANTISSA 7, OT bf16)
    where a code 1 + c / 2^bits is exact in bf16, whatever the query type; 32-bit operands for
    8-bit codes."""
    assert schedule.out_mantissa(2) == schedule.out_mantissa(4) == 7
    assert schedule.out_mantissa(8) == 0  # 8 bits do not fit bf16's 7
    for dtype in (mx.float16, mx.bfloat16):
        launch = gpu.decode_launch(_problem(True, dtype, None, 64, 4, 1, 8, 2), quantized=True)
        assert ("OUT_MANTISSA", 7) in launch["constants"] and ("OT", mx.bfloat16) in launch["constants"]
    launch = gpu.decode_launch(_problem(True, mx.bfloat16, None, 64, 8, 1, 8, 2), quantized=True)
    assert ("OUT_MANTISSA", 0) in launch["constants"]


INCLUDE = re.compile(r'^#include "(/[^"]+)"$', re.M)


def _by_path_cases():
    """(body_file, defines, launch bounds, constants) of every case's launches, the merge's too."""
    cases = []
    for case in CASES:
        for single_pass in (False, True):
            with policy_override(single_pass_max_s=4096 if single_pass else 0):
                launch = gpu.decode_launch(_problem(*case), quantized=case[0])
            cases.append((launch["body_file"], launch["defines"], launch["launch_bounds"], launch["constants"]))
            if launch["merge_constants"]:
                cases.append(("merge_partials.metal", (), None, launch["merge_constants"]))
                cases.append(("merge_partials.metal", (("FA_MERGE_WINDOW", 1),), None, launch["merge_constants"]))
    return cases


def test_cuda_sources_by_path_compile_the_same_text(monkeypatch):
    """On CUDA each metal/ file reaches MLX as an #include of its path (MLX copies the text it is
    handed into every call). With every #include replaced by its file, the text is the one handed
    over before; and MLX's search of the body for `name_shape`, `name_strides` and `name_ndim`
    finds the same names in both forms (the by-path body lists them in a comment)."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    names = schedule.PLAIN_INPUTS + schedule.QUANTIZED_INPUTS + schedule.COMMON_INPUTS + (
        "out_partial", "stats_partial", "out_window", "stats_window")
    for body_file, defines, bounds, constants in _by_path_cases():
        source, header = sources.kernel_sources(body_file, defines, bounds, constants)
        by_source, by_header = sources.kernel_sources(body_file, defines, bounds, constants, by_path=True)
        assert len(by_source) + len(by_header) < 1500 < len(source)
        included = INCLUDE.findall(by_header + by_source)
        assert [Path(p).name for p in included] == [sources.CUDA_COMPAT, *sources.HEADER_FILES, body_file]
        assert all(Path(p) == ROOT / "metal" / Path(p).name for p in included)

        def expand(text):
            return sources.compact_source(INCLUDE.sub(lambda m: Path(m.group(1)).read_text(), text))

        assert expand(by_header) == header
        listed = by_source[by_source.rindex("/*"):]
        assert expand(by_source[:-len(listed)]) == sources.compact_source(source)  # less the leading newline
        for name in names:
            for suffix in ("_shape", "_strides", "_ndim"):
                assert (name + suffix in source) == (name + suffix in by_source), (body_file, name + suffix)


def test_cuda_kernels_made_from_paths(monkeypatch, tmp_path):
    """gpu_launch._kernel hands mx.fast.cuda_kernel the by-path form, named by the digest of the files'
    text; the text itself where a path cannot be written in an #include (under the same name: the
    same text); and Metal always gets the text."""
    made = []
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **kwargs: made.append(kwargs))
    args = ("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal")
    by_path, as_text = sources.kernel_sources(*args[3:], by_path=True), sources.kernel_sources(*args[3:])

    def make():
        gpu_launch._kernel.cache_clear()
        gpu_launch._kernel(*args)
        gpu_launch._kernel.cache_clear()
        return made.pop()

    try:
        kernel = make()
        assert (kernel["source"], kernel["header"]) == by_path
        odd = tmp_path / 'me"tal'
        odd.mkdir()
        for name in sources.KERNEL_FILES + sources.HEADER_FILES + (sources.CUDA_COMPAT,):
            (odd / name).write_text(sources.read_kernel_file(name))
        monkeypatch.setattr(sources, "kernel_dir", lambda: odd)
        assert sources.include_line("merge_partials.metal") is None
        as_file = make()
        assert (as_file["source"], as_file["header"]) == as_text and as_file["name"] == kernel["name"]
        assert sources.kernel_sources(*args[3:], by_path=True) is None
        monkeypatch.setattr(sources, "on_metal", lambda: True)
        assert sources.kernel_sources(*args[3:], by_path=True) is None
    finally:
        gpu_launch._kernel.cache_clear()


SOURCES = sources.kernel_sources  # as the module has it, before a test patches it


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("quantized", [False, True])
def test_cuda_sources_by_path_compile(monkeypatch, quantized):
    """nvcc reads the #include lines from disk and builds the same kernel: registers and spills
    as from the text (NVRTC, which MLX compiles with, is checked on the H200 by every GPU run)."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    with policy_override(single_pass_max_s=0):
        launch = gpu.decode_launch(_problem(quantized, mx.bfloat16, "causal", 128, 4, 1, 32, 8, group_size=64),
                                   quantized=quantized)
    logs = []
    for by_path in (False, True):
        monkeypatch.setattr(sources, "kernel_sources", functools.partial(SOURCES, by_path=by_path))
        ok, log = nvcc_wrap.compile_cuda(nvcc_wrap.wrap_launch(launch), options=("-Xptxas", "-v"))
        assert ok, log
        logs.append(re.findall(r"Used \d+ registers|\d+ bytes spill \w+", log))
    assert logs[0] == logs[1] and logs[0], logs



def test_block_policy(monkeypatch):
    """Split blocks depend on S and the format, never on B: plain K/V that the matrix kernel can
    take get DEFAULT.max_block keys (and that kernel) from DEFAULT.plain_long_blocks_from_s on, and
    DEFAULT.plain_longer_block keys from DEFAULT.plain_longer_blocks_from_s on; quantized K/V,
    other plain K/V (f32, D = 80) and shorter S aim at DEFAULT.target_blocks blocks. Every S is
    split here (single_pass_max_s = 0), the one just below the threshold too."""
    monkeypatch.setattr(sources, "on_metal", lambda: False)
    long_from = DEFAULT.plain_long_blocks_from_s
    longer_from = DEFAULT.plain_longer_blocks_from_s
    def matrix_block(S):
        return schedule.block_keys(S, plain_matrix=True)

    assert matrix_block(long_from) == matrix_block(longer_from - 1) == DEFAULT.max_block
    assert matrix_block(longer_from) == matrix_block(10 ** 6) == DEFAULT.plain_longer_block
    assert schedule.block_keys(10 ** 6) == DEFAULT.max_block
    assert matrix_block(long_from - 1) == schedule.block_keys(long_from - 1) < DEFAULT.max_block
    assert schedule.block_keys(long_from) == max(DEFAULT.min_block, long_from // DEFAULT.target_blocks)

    def blocks(B, S, dtype=mx.bfloat16, D=128, quantized=False):
        q = mx.zeros((B, 8, 1, D), dtype=dtype)
        k = mx.zeros((B, 2, S, D), dtype=dtype)
        if quantized:
            kq = fa.quantize_kv(k, bits=4, group_size=64)
            launch = gpu.decode_launch(quantized_problem(q, kq, kq, None, None, None, 4, 64), quantized=True)
        else:
            launch = gpu.decode_launch(plain_problem(q, k, k, None, None, None), quantized=False)
        return launch["body_file"], launch["call"]["output_shapes"][0][3]

    def count(S, block):
        return -(-S // block)

    long_S = 4 * DEFAULT.max_block + 1
    below = count(long_from - 1, schedule.block_keys(long_from - 1))
    with policy_override(single_pass_max_s=0):
        for B in (1, 3, 32):
            for S in (long_from, long_S, longer_from + 1):
                plain = count(S, schedule.block_keys(S, plain_matrix=True))
                assert blocks(B, S) == ("decode_mma.metal", plain), (B, S)
                assert blocks(B, S, mx.float16, 64) == ("decode_mma.metal", plain), (B, S)
                aimed = count(S, schedule.block_keys(S))  # target_blocks, or fewer where min_block binds
                assert blocks(B, S, mx.float32) == ("decode_attention.metal", aimed), (B, S)
                assert blocks(B, S, D=80) == ("decode_attention.metal", aimed), (B, S)
                assert blocks(B, S, quantized=True) == ("decode_mma.metal", aimed), (B, S)
            assert blocks(B, long_from - 1) == ("decode_attention.metal", below), B
