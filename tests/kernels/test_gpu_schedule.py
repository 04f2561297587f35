"""The GPU kernels against the reference backend at the edges of their schedule.

The property suite covers the semantics on every backend; these fixed cases aim at what only
the kernels have: key-block boundaries (S = BLOCK +- 1, many blocks), row tiles (G * L above
MAX_ROWS), lanes past D (D = 80), blocks left empty by key ranges, and strided K/V; the edges,
tiles and masks both in one block and split into blocks merged by the second launch.
Skipped unless a GPU backend is under test.
"""

import contextlib
import math

import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend import gpu
from fusedattend.gpu import launch as gpu_launch, schedule
from fusedattend.conformance import oracle
from tests.kernels.policy_override import policy_override
from tests.property.strategies import block_edge_case, block_edge_tiles, oracle_of
from tests.property.conformance_adapter import check as check_property
from tests.property.test_online_softmax_parity import check_parity

DEFAULT = schedule.Policy()  # the shipped schedule

GPU_BACKENDS = ("metal", "cuda")
TOL = {mx.float32: 2e-5, mx.float16: 2e-3, mx.bfloat16: 1.6e-2}


def _skip_unless_gpu(backend):
    if backend not in GPU_BACKENDS:
        pytest.skip("GPU kernels only")


def _qkv(B, H_q, H_kv, L, S, D, dtype, seed, spare=0):
    key = mx.random.key(seed)
    kq, kk, kv = mx.random.split(key, 3)
    q = mx.random.normal((B, H_q, L, D), key=kq).astype(dtype)
    # K/V as slices of a longer preallocated buffer, as mlx_lm's KVCache hands them out.
    k = mx.random.normal((B, H_kv, S + spare, D), key=kk).astype(dtype)[:, :, :S, :]
    v = mx.random.normal((B, H_kv, S + spare, D), key=kv).astype(dtype)[:, :, :S, :]
    return q, k, v


def _reference(fn, *args, **kwargs):
    """The reference on the CPU: MLX's CUDA matmul may round float32 through TF32."""
    with mx.stream(mx.cpu):
        out = fn(*args, backend="reference", **kwargs)
        mx.eval(out)
    return out


def _close(out, ref, dtype):
    err = mx.max(mx.abs(out.astype(mx.float32) - ref.astype(mx.float32))).item()
    assert math.isfinite(err) and err <= TOL[dtype], f"max error {err} > {TOL[dtype]}"


BLOCK_EDGES = sorted({1, 7, DEFAULT.min_block - 1, DEFAULT.min_block, DEFAULT.min_block + 1, 1000, 4097, 9000,
                      DEFAULT.plain_longer_blocks_from_s + 1})

# Both launches at every S: "default" takes one block up to DEFAULT.single_pass_max_s, "split" splits
# every S into blocks merged by the second launch (DEFAULT.single_pass_max_s = 0); "split_mma" as
# "split", with plain f16 / bf16 K/V on decode_mma.metal in blocks of any length
# (DEFAULT.plain_mma_min_block = 0; by default only S >= DEFAULT.plain_long_blocks_from_s gives it split
# blocks long enough: in "split", S = 1000, 4097, 9000 and 32769 take it (the last in
# DEFAULT.plain_longer_block keys), the shorter S decode_attention.metal).
PATHS = ["default", "split", "split_mma"]


@pytest.fixture
def use_path(request):
    """use_path(name): that path's schedule constants for the rest of the test."""
    stack = contextlib.ExitStack()
    request.addfinalizer(stack.close)

    def use(path):
        if path != "default":
            stack.enter_context(policy_override(single_pass_max_s=0, **({"plain_mma_min_block": 0} if path == "split_mma" else {})))
    return use


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("S", BLOCK_EDGES)
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_block_edges(backend, S, dtype, path, use_path):
    _skip_unless_gpu(backend)
    use_path(path)
    q, k, v = _qkv(2, 8, 2, 1, S, 128, dtype, seed=S, spare=5)
    _close(fa.decode_attention(q, k, v, backend=backend), _reference(fa.decode_attention, q, k, v), dtype)


def _edge_block(S, path="default", quantized=False):
    """The keys of a block at S on `path` for bf16, D = 128: one block of S keys where "default"
    takes one; else the split block, plain K/V's the matrix kernel's (it takes them at D = 128)."""
    return S if path == "default" and S <= DEFAULT.single_pass_max_s else schedule.block_keys(S, plain_matrix=not quantized)


def _edge_case(S, block, bits=None, group_size=64):
    return block_edge_case(block, S, D=128, seed=S, bits=bits, group_size=group_size)


# Quantized K/V's blocks (schedule.block_keys(S); one block up to DEFAULT.single_pass_max_s): 256 keys at
# S = 1000 and 4097, 512 at 9000 (short blocks), 1024 at 32769 (long, staged on CUDA).
QUANTIZED_EDGES = (300, 1000, 4097, 9000, 32769)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("S", BLOCK_EDGES)
def test_block_edges_weigh_much(backend, S, path, use_path):
    """The same edges with bf16 keys that carry a third of each row's weight at the blocks'
    first and last tiles (block_edge_case): random keys each weigh about 1 / S, so at large S a
    block that drops or repeats a tile stays inside the tolerance; these keys do not
    (test_lost_edge_tiles_fail, below). Oracle parity and the per-request loop."""
    _skip_unless_gpu(backend)
    use_path(path)
    case = _edge_case(S, _edge_block(S, path))
    check_parity(case, backend)
    check_property("batch_invariance", case, backend)


@pytest.mark.parametrize("bits,group_size", [(4, 64), (2, 32), (8, 128)])
@pytest.mark.parametrize("S", QUANTIZED_EDGES)
def test_quantized_block_edges_weigh_much(backend, S, bits, group_size):
    """test_block_edges_weigh_much's keys through mx.quantize, in the quantized blocks."""
    _skip_unless_gpu(backend)
    case = _edge_case(S, _edge_block(S, quantized=True), bits, group_size)
    check_parity(case, backend)
    check_property("batch_invariance", case, backend)


@pytest.mark.parametrize("S,block,bits,group_size",
                         sorted({(S, _edge_block(S, path), None, 64) for S in BLOCK_EDGES for path in PATHS})
                         + [(S, _edge_block(S, quantized=True), 4, 64) for S in QUANTIZED_EDGES]
                         + [(32769, _edge_block(32769, quantized=True), bits, gs) for bits, gs in ((2, 32), (8, 128))])
def test_lost_edge_tiles_fail(S, block, bits, group_size):
    """What the block-edge tests on weighty keys rest on, on any machine: on their keys (plain, and
    quantized), the oracle without every block's last tile of 16 keys, or without every block's
    first, is off by several times the parity tolerance."""
    case = _edge_case(S, block, bits, group_size)
    expected, stats = oracle_of(case)
    tol = oracle.parity_tolerance(expected, stats, case.dtype_name, case.dims[-1])
    first, last = block_edge_tiles(block, S)
    for lost, tiles in (("last", last), ("first", first)):
        ratio, err = oracle.compare(oracle_of(case, mask=~tiles[None, :])[0], expected, tol)
        assert ratio > 4, f"each block's {lost} tile lost: only {ratio:.3g}x the tolerance (max err {err:.3g})"


@pytest.mark.parametrize("H_q,H_kv,L", [(32, 1, 8), (12, 4, 3), (4, 4, 8), (8, 2, 5)])
@pytest.mark.parametrize("D", [8, 64, 80, 96, 128, 256])
@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_tiles_head_dims_masks(backend, H_q, H_kv, L, D, mask, path, dtype, use_path):
    _skip_unless_gpu(backend)
    if path == "split_mma" and (dtype == mx.float32 or not schedule.uses_mma(dtype, D, quantized=False, single_pass=True, block=0)):
        pytest.skip("this problem never takes decode_mma.metal")
    use_path(path)
    S = 300
    q, k, v = _qkv(2, H_q, H_kv, L, S, D, dtype, seed=D + L)
    if mask == "bool":
        mask = mx.random.bernoulli(0.7, (2, 1, L, S), key=mx.random.key(D))
    elif mask == "additive":
        mask = mx.where(mx.random.bernoulli(0.7, (L, S), key=mx.random.key(L)),
                        mx.random.normal((L, S), key=mx.random.key(3)), -mx.inf)
    _close(fa.decode_attention(q, k, v, mask=mask, backend=backend),
           _reference(fa.decode_attention, q, k, v, mask=mask), dtype)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mask", [None, "causal"])
def test_key_ranges_leave_blocks_empty(backend, mask, path, use_path):
    _skip_unless_gpu(backend)
    use_path(path)
    S = 5000
    q, k, v = _qkv(4, 8, 2, 2, S, 128, mx.bfloat16, seed=11)
    ranges = mx.array([[0, 5000], [4000, 1000], [10, 3], [2500, 0]], dtype=mx.int32)
    out = fa.decode_attention(q, k, v, mask=mask, key_ranges=ranges, backend=backend)
    _close(out, _reference(fa.decode_attention, q, k, v, mask=mask, key_ranges=ranges), mx.bfloat16)
    assert mx.array_equal(out[3], mx.zeros_like(out[3]))
    padded = fa.KeyRanges.from_padding(left=[0, 4000, 10, 2500], right=[0, 0, 4987, 2500])  # the same ranges
    assert mx.array_equal(fa.decode_attention(q, k, v, mask=mask, key_ranges=padded, backend=backend), out)


@pytest.mark.parametrize("bits,group_size", [(2, 32), (4, 64), (8, 128), (4, 32)])
def test_quantized_block_edges(backend, bits, group_size):
    _skip_unless_gpu(backend)
    q, k, v = _qkv(2, 8, 2, 1, 4097, 128, mx.bfloat16, seed=bits)
    kq, vq = fa.quantize_kv(k, bits=bits, group_size=group_size), fa.quantize_kv(v, bits=bits, group_size=group_size)
    _close_quantized(backend, q, kq, vq, bits, group_size)


def _close_quantized(backend, q, kq, vq, bits, group_size):
    """The quantized call on `backend` against the reference on the CPU, at bf16's tolerance."""
    kw = dict(bits=bits, group_size=group_size)
    _close(fa.quantized_decode_attention(q, kq, vq, backend=backend, **kw),
           _reference(fa.quantized_decode_attention, q, kq, vq, **kw), mx.bfloat16)


def _scales_within(x, lead, width):
    """x's values as a view into a wider buffer: `lead` columns before a row's groups, rows
    `width` columns apart."""
    groups = x.shape[-1]
    wide = mx.zeros(x.shape[:-1] + (width,), dtype=x.dtype)
    wide[..., lead:lead + groups] = x
    return wide[..., lead:lead + groups]


@pytest.mark.parametrize("layout", ["slice_of_a_cache", "rows_two_bytes_in", "odd_row_stride", "v_biases_two_bytes_in"])
@pytest.mark.parametrize("path", ["default", "split"])
def test_quantized_scale_layouts(backend, layout, path, use_path):
    """Scales and biases that the matrix kernel loads two groups at a time (a 32-bit load on
    CUDA) only where every array's rows are 4-byte aligned; otherwise element by element. A slice
    of a longer cache keeps the packed loads."""
    _skip_unless_gpu(backend)
    use_path(path)
    B, H_kv, S, D, bits, group_size = 2, 2, 700, 128, 4, 64
    q, k, v = _qkv(B, 8, H_kv, 1, S + 36, D, mx.bfloat16, seed=5)
    kq, vq = (fa.quantize_kv(x, bits=bits, group_size=group_size) for x in (k, v))
    if layout == "slice_of_a_cache":
        kq, vq = (type(x)(*(a[:, :, 36:] for a in x)) for x in (kq, vq))
    else:
        kq, vq = (type(x)(*(a[:, :, :S] for a in x)) for x in (kq, vq))
        lead, width = (1, 4) if layout != "odd_row_stride" else (0, 3)
        if layout == "v_biases_two_bytes_in":
            vq = vq._replace(biases=_scales_within(vq.biases, lead, width))
        else:
            kq, vq = (x._replace(scales=_scales_within(x.scales, lead, width),
                                 biases=_scales_within(x.biases, lead, width)) for x in (kq, vq))
    _close_quantized(backend, q, kq, vq, bits, group_size)


@pytest.mark.parametrize("D, group_size", [(128, 128), (64, 64), (96, 32), (128, 32)])
@pytest.mark.parametrize("path", ["default", "split"])
def test_quantized_group_counts(backend, D, group_size, path, use_path):
    """1, 1, 3 and 4 groups a row: a key's scales load whole as 2, 2, 6 and 8 bytes on CUDA."""
    _skip_unless_gpu(backend)
    use_path(path)
    q, k, v = _qkv(2, 8, 2, 1, 1000, D, mx.bfloat16, seed=D + group_size)
    kq, vq = (fa.quantize_kv(x, bits=4, group_size=group_size) for x in (k, v))
    _close_quantized(backend, q, kq, vq, 4, group_size)


@pytest.mark.parametrize("layout", ["contiguous", "slice_of_a_cache", "codes_one_word_in"])
@pytest.mark.parametrize("S", [40, 1000, 4097, 40000])
@pytest.mark.parametrize("bits,group_size,D", [(4, 64, 128), (8, 32, 128), (2, 32, 64)])
def test_quantized_staged_tiles_are_bit_identical_to_direct_loads(backend, bits, group_size, D, S, layout):
    """Split blocks that stage their tiles through threadgroup memory (DEFAULT.quantized_stages: cp.async
    on CUDA) compute what the loads straight from device memory do, bit for bit, short blocks
    and long, 4-, 8- and 16-byte scale rows; code rows not 16-byte aligned (a word into a wider
    buffer) take the 64-bit pass, which never stages. Key ranges end mid-tile and mid-block."""
    _skip_unless_gpu(backend)
    q, k, v = _qkv(2, 8, 2, 1, S + 16, D, mx.bfloat16, seed=S + bits)
    kq, vq = (fa.quantize_kv(x, bits=bits, group_size=group_size) for x in (k, v))
    if layout == "slice_of_a_cache":
        kq, vq = (type(x)(*(a[:, :, 16:] for a in x)) for x in (kq, vq))
    else:
        kq, vq = (type(x)(*(a[:, :, :S] for a in x)) for x in (kq, vq))
    if layout == "codes_one_word_in":
        kq, vq = (x._replace(codes=_scales_within(x.codes, 1, x.codes.shape[-1] + 4)) for x in (kq, vq))
    key_ranges = mx.array([[0, S], [S // 3, S - S // 3 - 5 if S > 8 else 1]], dtype=mx.int32)
    kw = dict(bits=bits, group_size=group_size, key_ranges=key_ranges)
    with policy_override(single_pass_max_s=0):
        staged = fa.quantized_decode_attention(q, kq, vq, backend=backend, **kw)
        with policy_override(quantized_stages=0, quantized_short_block_stages=0):
            direct = fa.quantized_decode_attention(q, kq, vq, backend=backend, **kw)
    assert mx.array_equal(staged, direct).item()
    _close(staged, _reference(fa.quantized_decode_attention, q, kq, vq, **kw), mx.bfloat16)


@pytest.mark.parametrize("layout", ["contiguous", "slice_of_a_cache"])
@pytest.mark.parametrize("S", [40, 1000, 4097, 40000])
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16], ids=["bf16", "f16"])
def test_plain_prefetch_is_bit_identical_to_none(backend, dtype, S, layout):
    """Plain K/V's tiles asked ahead into L2 (DEFAULT.plain_prefetch_tiles: split launches of at most
    DEFAULT.plain_prefetch_max_threadgroups threadgroups, so for small B) compute what the launch
    without the hints does, bit for bit: split blocks (S = 40, one block, takes none either way),
    key ranges that end mid-tile."""
    _skip_unless_gpu(backend)
    q, k, v = _qkv(2, 8, 2, 1, S, 128, dtype, seed=S, spare=16 if layout == "slice_of_a_cache" else 0)
    key_ranges = mx.array([[0, S], [S // 3, S - S // 3 - 5 if S > 8 else 1]], dtype=mx.int32)
    with policy_override(plain_prefetch_max_threadgroups=1 << 30):
        hinted = fa.decode_attention(q, k, v, key_ranges=key_ranges, backend=backend)
    with policy_override(plain_prefetch_max_threadgroups=0):
        unhinted = fa.decode_attention(q, k, v, key_ranges=key_ranges, backend=backend)
    assert mx.array_equal(hinted, unhinted).item()
    _close(hinted, _reference(fa.decode_attention, q, k, v, key_ranges=key_ranges), dtype)


@pytest.mark.parametrize("path", PATHS)
def test_batch_and_layers_are_bit_identical_to_single_calls(backend, path, use_path):
    _skip_unless_gpu(backend)
    use_path(path)
    NL, B, S = 3, 5, 2049
    key = mx.random.key(0)
    q = mx.random.normal((NL, B, 8, 1, 128), key=key).astype(mx.bfloat16)
    k = mx.random.normal((NL, B, 2, S, 128), key=mx.random.key(1)).astype(mx.bfloat16)
    v = mx.random.normal((NL, B, 2, S, 128), key=mx.random.key(2)).astype(mx.bfloat16)
    out = fa.decode_attention(q, k, v, mask="causal", backend=backend)
    for layer in range(NL):
        for b in range(B):
            one = fa.decode_attention(q[layer, b:b + 1], k[layer, b:b + 1], v[layer, b:b + 1],
                                      mask="causal", backend=backend)
            assert mx.array_equal(out[layer, b:b + 1], one), (layer, b)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("layout", ["d_strided", "misaligned", "broadcast_heads"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_kv_layouts_the_vector_loads_cannot_take(backend, layout, dtype, path, use_path):
    """Rows that are not contiguous, or not 16-byte aligned, or repeat: the element-wise path."""
    _skip_unless_gpu(backend)
    use_path(path)
    B, H_kv, S, D = 2, 2, 700, 64
    q = mx.random.normal((B, 8, 1, D), key=mx.random.key(1)).astype(dtype)
    if layout == "d_strided":  # the D axis is the slow one: a transposed buffer
        k = mx.swapaxes(mx.random.normal((B, H_kv, D, S), key=mx.random.key(2)).astype(dtype), -1, -2)
        v = mx.swapaxes(mx.random.normal((B, H_kv, D, S), key=mx.random.key(3)).astype(dtype), -1, -2)
    elif layout == "misaligned":  # rows start 4 elements into a wider buffer
        k = mx.random.normal((B, H_kv, S, D + 8), key=mx.random.key(2)).astype(dtype)[..., 4:D + 4]
        v = mx.random.normal((B, H_kv, S, D + 8), key=mx.random.key(3)).astype(dtype)[..., 4:D + 4]
    else:  # one K/V row broadcast over the kv heads (stride 0)
        k = mx.broadcast_to(mx.random.normal((B, 1, S, D), key=mx.random.key(2)).astype(dtype), (B, H_kv, S, D))
        v = mx.broadcast_to(mx.random.normal((B, 1, S, D), key=mx.random.key(3)).astype(dtype), (B, H_kv, S, D))
    _close(fa.decode_attention(q, k, v, backend=backend), _reference(fa.decode_attention, q, k, v), dtype)
