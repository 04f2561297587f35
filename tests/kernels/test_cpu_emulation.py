"""The GPU kernels' logic, checked where there is no GPU: fusedattend.gpu with every metal/ body
compiled for the host and run one fiber per GPU thread (tests/kernels/cpu_emulator.py).

The same properties as on a GPU, on small shapes: parity with the float64 oracle (pinned
schedule edges and drawn cases), and bit-exact batch and layer invariance; and the same short
cases both in one block (S <= DEFAULT.single_pass_max_s) and split into blocks merged by a second
launch. A change to a kernel is checked here, CI included, before it reaches a GPU.
"""

import contextlib
import dataclasses
import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import fusedattend as fa
from fusedattend import KeyRanges, backends
from fusedattend.gpu import launch as gpu_launch, schedule, sources
from tests.kernels.cpu_emulator import compiler_available, emulated_gpu
from tests.kernels.emulated_layouts import independent_layouts
from tests.kernels.policy_override import policy_override
from tests.property.strategies import (
    attention_cases, block_edge_case, cancelling_case, climbing_case, edge_case, examples, kv_layout, pinned,
    pinned_cases, pinned_layered_cases, pinned_quantized_cases, quantized_cases, run_case,
)
from tests.property.conformance_adapter import check as check_property
from tests.property.test_mask_semantics import (
    check_hidden_garbage, check_poisoned_rows, check_zero_weight_values_skipped,
)
from tests.property.test_online_softmax_parity import check_parity

DEFAULT = schedule.Policy()  # the shipped schedule
SOURCES = sources.kernel_sources  # as the module has it, before a test patches it

pytestmark = pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")

# Short S around the key-block sizes (DEFAULT.min_block = 256; 128 before) and the step of 16 keys.
SHORT_S = (1, 2, 3, 15, 17, 63, 127, 128, 129, 255, 257)
# The suites' NL = 1 edge, and a shorter multi-layer one than theirs (S = 1024 runs slowly here).
LAYERED = pinned_layered_cases()[:1] + [edge_case(NL=3, B=2, S=130, L=3, layered=True, mask="bool_hidden_row")]


@st.composite
def short_cases(draw, layered=None):
    """Plain or quantized cases of every kind the suites draw, with short key sequences, and K, V
    and the mask each in a layout of its own (emulated_layouts.py: the suites' cases give K and V
    one layout, so a kernel that confuses their strides passes them)."""
    S = draw(st.sampled_from(SHORT_S))
    if draw(st.booleans()):
        case = draw(quantized_cases(S=S, layered=layered))
    else:
        case = draw(attention_cases(S=S, layered=layered, max_B=2, max_NL=2))
    return draw(independent_layouts(case))


@pinned(pinned_cases() + pinned_quantized_cases() + LAYERED)
@examples(0.4)
@given(case=short_cases())
def test_emulated_kernels_match_oracle(case):
    with emulated_gpu():
        check_parity(case, "cuda")


@examples(0.2)
@given(case=short_cases(), fiber_seed=st.integers(1, 2**16))
def test_emulated_batch_equals_per_request(case, fiber_seed):
    """(with the threads of a threadgroup in a random order: cpu_compat.h)"""
    with emulated_gpu(fiber_seed=fiber_seed):
        check_property("batch_invariance", case, "cuda")


@pinned(LAYERED)
@examples(0.2)
@given(case=short_cases(layered=True))
def test_emulated_layer_call_equals_stacked_layers(case):
    with emulated_gpu():
        check_property("layer_invariance", case, "cuda")


@examples(0.2)
@given(case=short_cases())
def test_emulated_split_blocks(case):
    """The short cases above mostly take one block (S <= DEFAULT.single_pass_max_s): here the same
    cases split into blocks and merged by the second launch, for oracle parity and batch
    invariance, and where the split path also has a single block (S <= DEFAULT.min_block), the
    very output of the single pass when both launches stream the keys alike."""
    with emulated_gpu():
        one = run_case(case, "cuda")
        with policy_override(single_pass_max_s=0):
            check_parity(case, "cuda")
            check_property("batch_invariance", case, "cuda")
        # the single pass's threads, keys in flight and kernel (decode_mma.metal where it takes it)
        alike = dict(simdgroups=DEFAULT.single_pass_simdgroups, quantized_mma_simdgroups=DEFAULT.single_pass_simdgroups,
                     plain_mma_simdgroups=DEFAULT.single_pass_simdgroups,
                     key_bytes_in_flight=DEFAULT.single_pass_key_bytes_in_flight, plain_mma_min_block=0)
        with policy_override(single_pass_max_s=0, **alike):
            two = run_case(case, "cuda")
    if case.dims[5] <= DEFAULT.min_block:
        assert mx.array_equal(one, two), f"single pass != two launches with one block: {case}"


# merge_partials.metal over more blocks than a simdgroup has lanes (its loop of 32 blocks at a
# time), with blocks that see no key (a hidden row, an empty range), and D = 8 and 72, whose
# merge threadgroups have lanes past D. Tiny blocks make NB = 33 to 100 at short S.
MANY_BLOCKS_CASES = [
    edge_case(S=130, D=8, H_q=8, H_kv=1, mask="bool_hidden_row"),
    edge_case(S=257, D=72, H_q=4, H_kv=2, mask="causal", key_ranges=[[3, 250], [100, 0]]),
    edge_case(S=200, D=32, H_q=8, H_kv=8, bits=4, group_size=32, key_ranges=[[150, 50], [0, 1]]),
]


@pytest.mark.parametrize("target_blocks", [64, 128])
@pinned(MANY_BLOCKS_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_merge_of_many_blocks(target_blocks, case):
    """Oracle parity and batch invariance with blocks of 2-8 keys: 33 to 100 states a row."""
    with emulated_gpu(), policy_override(single_pass_max_s=0, min_block=1, target_blocks=target_blocks):
        S = case.dims[5]
        assert math.ceil(S / schedule.block_keys(S)) > 32
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


# Query rows against the lanes of a key (metal/decode_attention.metal's reduce-scatter): more
# rows than lanes, so a lane keeps several rows' softmax (D = 8: 2 lanes a key, 8 rows; D = 16 with
# L = 4: 4 lanes, 8 rows over two positions each), and as many rows as lanes, so that every level
# scatters and none is left to a plain butterfly (4-bit, D = 32: 8 lanes, 8 rows).
SCATTER_CASES = [
    edge_case(S=130, D=8, H_q=8, H_kv=1, mask="bool_hidden_row"),
    edge_case(S=33, D=16, L=4, H_q=4, H_kv=2, mask="causal"),
    edge_case(S=129, D=32, H_q=8, H_kv=1, bits=4, group_size=32, mask="additive"),
]


@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
@pinned(SCATTER_CASES)
@settings(phases=[Phase.explicit])  # these cases only: the drawn ones are the tests' above
@given(case=short_cases())
def test_emulated_rows_against_lanes(single_pass_max_s, case):
    """Oracle parity and batch invariance at those layouts, in one block and split."""
    with emulated_gpu(), policy_override(single_pass_max_s=single_pass_max_s):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pinned(pinned_cases()[:3] + pinned_quantized_cases()[:1] + LAYERED[:1])
@examples(0.1)
@given(case=short_cases())
def test_emulated_single_pass_with_8_simdgroups(case):
    """single_pass_simdgroups = 8 (a policy a sweep may try, not the default): oracle parity and
    batch invariance with twice the threads streaming one block."""
    with emulated_gpu(), policy_override(single_pass_simdgroups=8, single_pass_max_s=4096):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


# metal/decode_mma.metal over plain K/V (the f16 / bf16 cases above with D <= 128, a multiple of
# 32, take it in one block; split blocks only from DEFAULT.plain_mma_min_block keys, so these tests
# lower that to 0) at edges of its own: two row tiles (G * L = 16 rows, and 12 over three positions),
# D = 32, 64, 96 and 128, masks of every kind (a row that sees no key; rows that see different
# keys), key ranges that leave blocks empty, and non-contiguous K/V (edge_case's default: the
# element-wise loads). Hidden keys holding NaN are test_mask_semantics' (drawn cases above).
PLAIN_MMA_CASES = [
    edge_case(S=47, D=128, H_q=32, H_kv=2, mask="bool_hidden_row"),
    edge_case(S=33, D=64, L=3, H_q=8, H_kv=2, mask="causal", dtype=mx.float16),
    edge_case(S=130, D=96, H_q=4, H_kv=1, mask="additive"),
    edge_case(S=200, D=32, H_q=8, H_kv=8, key_ranges=KeyRanges.from_padding(left=[150, 0], right=[0, 199]),
              noncontig=False),  # (150, 50) and (0, 1) as padding: the kernels' negative second words
    edge_case(S=129, D=128, H_q=8, H_kv=2, noncontig=False, dtype=mx.float16),
]


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
@pinned(PLAIN_MMA_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_plain_matrices(single_pass_max_s, layout, case):
    """Oracle parity and batch invariance of the simdgroup-matrix kernel over plain K/V, in one
    block and split, in Apple's layout and in cuda_compat.h's (as the quantized cases below)."""
    assert schedule.uses_mma(case.dtype, case.dims[-1], quantized=False, single_pass=True, block=0)
    with emulated_gpu(layout), policy_override(single_pass_max_s=single_pass_max_s, plain_mma_min_block=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pinned(PLAIN_MMA_CASES[:4])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_plain_matrices_hidden_nan(layout, case):
    """NaN and Inf in the K and V of keys no row sees (a weight of 0 times NaN is NaN in a
    product): bit-identical to the clean call, split (the block's end reads past hi too)."""
    with emulated_gpu(layout), policy_override(single_pass_max_s=0, plain_mma_min_block=0):
        check_hidden_garbage(case, "cuda")


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("longer", [False, True], ids=["long", "longer"])
def test_emulated_plain_matrices_long_blocks(layout, longer):
    """The matrix kernel's long plain blocks (DEFAULT.max_block keys from DEFAULT.plain_long_blocks_from_s
    on, DEFAULT.plain_longer_block from DEFAULT.plain_longer_blocks_from_s on; the thresholds lowered here
    so that a short S takes them): the last block partial, the keys at the blocks' edges weighing
    much (block_edge_case). Oracle parity and batch invariance."""
    block = DEFAULT.plain_longer_block if longer else DEFAULT.max_block
    S = (1 if longer else 2) * block + 52
    case = block_edge_case(block, S)
    lowered = dict(plain_longer_blocks_from_s=1) if longer else dict(plain_long_blocks_from_s=1)
    with emulated_gpu(layout), policy_override(single_pass_max_s=0, **lowered):
        assert schedule.block_keys(S, plain_matrix=True) == block
        assert schedule.uses_mma(case.dtype, case.dims[-1], quantized=False, single_pass=False, block=block)
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pinned(pinned_cases()[:3] + PLAIN_MMA_CASES[:2])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_plain_without_matrices(case):
    """decode_attention.metal keeps plain f32, D > 128 and D not a multiple of 32: f16 / bf16
    cases through it too (plain_mma_max_d = 0)."""
    with emulated_gpu(), policy_override(plain_mma_max_d=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


# metal/decode_mma.metal over quantized K/V (the quantized cases above with f16 / bf16 queries and
# D <= 128 take it) at edges of its own: two row tiles (G * L = 16 and 12 rows, 8 a tile), every code width
# and group size, D = 32 and 96 (one group and three), key ranges that leave blocks empty, and
# both kinds of score operands (schedule.score_mantissa): 16-bit in bf16 (4-bit codes) and f16 (8- and
# 2-bit), 32-bit for 2-bit codes in groups of 32; and both kinds of output operands
# (schedule.out_mantissa): 16-bit in bf16 for 2- and 4-bit codes, 32-bit for 8-bit ones.
MMA_CASES = [
    edge_case(S=257, D=128, H_q=32, H_kv=2, bits=4, group_size=32, mask="bool_hidden_row"),
    edge_case(S=33, D=64, L=3, H_q=8, H_kv=2, bits=8, group_size=64, mask="causal", dtype=mx.float16),
    edge_case(S=130, D=96, H_q=4, H_kv=1, bits=2, group_size=32, mask="additive"),
    edge_case(S=200, D=32, H_q=8, H_kv=8, bits=4, group_size=32, key_ranges=[[150, 50], [0, 1]]),
    edge_case(S=129, D=128, H_q=4, H_kv=2, bits=4, group_size=128, mask="causal", L=2),
    edge_case(S=47, D=64, H_q=8, H_kv=1, bits=2, group_size=64, dtype=mx.float16),
]


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
@pinned(MMA_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_matrices(single_pass_max_s, layout, case):
    """Oracle parity and batch invariance of the simdgroup-matrix kernel, in one block and split,
    with Apple's placement of matrix elements (the Metal form) and with cuda_compat.h's (its
    layout functions, row masks and fa_acc_as_b as compiled for the H200, against PTX's fragment
    tables as tests/kernels/cpu_compat.h states them; only the asm products are emulated)."""
    assert schedule.uses_mma(case.dtype, case.dims[-1], quantized=True, single_pass=False, block=0)
    with emulated_gpu(layout), policy_override(single_pass_max_s=single_pass_max_s):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


# Cases that stage (schedule.quantized_stages): 8-, 4- and 16-byte scale rows a key, 16-, 32- and
# 4-word code rows, both output forms (8-bit codes: 32-bit operands), masks and key ranges, blocks
# of 8 tiles a simdgroup and a partial one.
STAGED_CASES = [
    MMA_CASES[0],
    edge_case(S=300, D=128, H_q=8, H_kv=2, bits=4, group_size=64,
              key_ranges=KeyRanges.from_padding(left=[37, 0], right=[13, 299])),  # (37, 250), (0, 1)
    edge_case(S=520, D=128, H_q=8, H_kv=4, bits=8, group_size=32, mask="bool_hidden_row"),
    edge_case(S=129, D=64, L=2, H_q=4, H_kv=1, bits=2, group_size=32, mask="causal"),
]


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pinned(STAGED_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_matrices_staged(stages, layout, case):
    """Split blocks that stage their tiles through threadgroup memory, 1 to 3 ahead
    (decode_mma.metal's STAGES; on the H200 cp.async, here copies at once): each lane copies
    pieces of keys that other lanes read, so a slot overwritten before every lane has read it,
    or read before every lane has filled it, gives wrong rows here, where lanes run in turn
    between barriers. Cases that cannot stage (schedule.quantized_stages) load directly."""
    with emulated_gpu(layout), policy_override(stage_on_metal=True, quantized_stages=stages,
                                             quantized_short_block_stages=stages, single_pass_max_s=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


def test_emulated_staged_cases_stage():
    with emulated_gpu(), policy_override(stage_on_metal=True):
        assert all(schedule.quantized_stages(c.dims[-1], c.bits, c.group_size, c.dtype, single_pass=False, short=False,
                                             on_metal=sources.on_metal()) for c in STAGED_CASES)


@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
@pinned([c for c in MMA_CASES if c.mask_kind != "none" or c.key_ranges is not None])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_matrices_hidden_nan(single_pass_max_s, case):
    """NaN / Inf in the scales and biases of keys no row sees: bit-identical to the clean call.
    The kernel's `p != 0` guards hold with masks; with key ranges alone it never reads a key
    before the range and reads those past it as the last in it."""
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=single_pass_max_s):
        check_hidden_garbage(case, "cuda")


@pytest.mark.parametrize("where", ["k", "v", "mask_nan", "mask_inf"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
@pytest.mark.parametrize("plain_mma", [True, False], ids=["matrices", "cuda_cores"])
def test_emulated_nan_reaching_a_visible_score(plain_mma, single_pass_max_s, where):
    """NaN in a visible key or value, or a NaN / +inf additive mask entry: the rows that see it
    are NaN, not zeros (fa_normalise), in one block and split (the merge), and the rest is the
    clean call's to the bit. Both plain kernels."""
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=single_pass_max_s,
                                                 plain_mma_max_d=DEFAULT.plain_mma_max_d if plain_mma else 0,
                                                 plain_mma_min_block=0):
        for case in PLAIN_MMA_CASES[1:4]:  # [0] hides every row
            for which in range(2):
                assert check_poisoned_rows(case, "cuda", which, where)


@pytest.mark.parametrize("kernel", ["matrices", "cuda_cores", "quantized"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
def test_emulated_values_reach_only_rows_that_weigh_them(kernel, single_pass_max_s):
    """NaN / Inf in V (or V's scales) of keys some rows of a tile see and others do not (causal
    L > 1, per-row masks, a per-row additive -1e6 that underflows): the rows that weigh them 0
    are the clean call's to the bit, in each kernel (the plain matrix kernel's row-at-a-time
    product), in one block and split (the merges' skipped states)."""
    cases = MMA_CASES[1:3] + MMA_CASES[4:5] if kernel == "quantized" else PLAIN_MMA_CASES[1:3]
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=single_pass_max_s,
                                                 plain_mma_max_d=0 if kernel == "cuda_cores" else DEFAULT.plain_mma_max_d,
                                                 plain_mma_min_block=0):
        for case in cases:
            # the property's seed picks the garbage (NaN, Inf, -Inf: seed % 3) and whether an
            # additive mask underflows weights (seed // 3 odd); quantized cases take NaN only
            underflows = (0, 1) if case.mask_kind == "additive" else (0,)
            for seed in (g + 3 * u for u in underflows for g in range(1 if case.bits else 3)):
                check_property("partly_hidden_nan_values", case, "cuda", seed=seed)


@pytest.mark.parametrize("pattern", ["masked_block", "dominant_key"])
@pytest.mark.parametrize("kernel", ["matrices", "cuda_cores", "quantized"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
def test_emulated_values_of_zero_weight_are_skipped(kernel, single_pass_max_s, pattern):
    """A value every row weighs 0 in float32, with NaN in it: skipped by the slot and simdgroup
    merges, merge_partials.metal (a key block weighed 0, split), the online rescale, and the
    quantized kernel's weight x scale products without a mask (dominant_key)."""
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=single_pass_max_s,
                                                 plain_mma_max_d=0 if kernel == "cuda_cores" else DEFAULT.plain_mma_max_d,
                                                 plain_mma_min_block=0):
        check_zero_weight_values_skipped("cuda", kernel == "quantized", pattern)


@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
def test_emulated_quantized_nan_scale_of_a_visible_key(single_pass_max_s):
    """The same for a NaN scale of a visible key in quantized K."""
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=single_pass_max_s):
        for case in MMA_CASES[1:5]:  # [0] hides every row
            assert check_poisoned_rows(case, "cuda", 0, "scales")


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
def test_emulated_plain_matrices_keep_small_weights_in_f16(single_pass_max_s, layout):
    """The output's weights reach the products as two f16 parts on NVIDIA, whose smallest step is
    2^-24: 511 keys of weight 2^-25 against one of weight 1 (V 1000 against 0) must still give
    511 * 2^-25 * 1000 = 0.0152, not 0 (schedule.plain_weight_scale_log2 scales them into range)."""
    S, D = 512, 32
    q = mx.zeros((1, 1, 1, D)).at[..., 0].add(1.0).astype(mx.float16)
    k = mx.zeros((1, 1, S, D)).at[:, :, 1:, 0].add(-25 * math.log(2)).astype(mx.float16)
    v = mx.zeros((1, 1, S, D)).at[:, :, 1:, :].add(1000.0).astype(mx.float16)
    with emulated_gpu(layout), policy_override(single_pass_max_s=single_pass_max_s, plain_mma_min_block=0):
        assert schedule.uses_mma(mx.float16, D, quantized=False, single_pass=True, block=0)
        out = fa.decode_attention(q, k, v, scale=1.0, backend="cuda")
    want = fa.decode_attention(q, k, v, scale=1.0, backend="reference").astype(mx.float32)
    assert 0.014 < want[0, 0, 0, 0].item() < 0.017
    assert mx.allclose(out.astype(mx.float32), want, rtol=2e-3, atol=0).item(), (out[0, 0, 0, :4], want[0, 0, 0, :4])


@pytest.mark.parametrize("q_scale", [0.02, 0.07, 0.12])
def test_emulated_quantized_output_keeps_float_accuracy(q_scale):
    """The 4-bit output's weights (a softmax weight times its key's V scale: any float) reach the
    16-bit products as bf16 parts on NVIDIA. Two keys whose V rows cancel, with nearly equal
    weights, give an output near 0, where the parity bound is its float32 part alone
    (strategies.cancelling_case): two parts' 16 bits exceeded it in each of these cases (err/tol
    1.25, 1.04, 1.17), three keep float's 24."""
    with emulated_gpu("nvidia"):
        assert schedule.out_mantissa(4) != 0
        check_parity(cancelling_case(q_scale), "cuda")


def _queries_scaled(case, head_scales, dim_scales=1.0):
    """`case` with query head h times head_scales[h], and each dim times dim_scales."""
    q = np.array(case.q.astype(mx.float32)) * np.asarray(head_scales, dtype=np.float64)[:, None, None] * dim_scales
    return dataclasses.replace(case, q=mx.array(q.astype(np.float32)).astype(case.dtype))


# Query heads of one kv group whose sizes lie up to 2^199 apart (one all zero), and a row whose
# dims are 2^66 apart. Drawn cases give every row about the same size, so a score operand scaled
# by one row's size and undone by another's goes unseen there; here rows of size 1 and 7 sit
# beside rows of 1e-3 and 1e3, where a swapped factor shows (commit d205b41: docs/h200/f16-scores/: rows' factors
# crossed fail all 8 cases). Rows far out (1e30) are bound by their own rounding: any weights
# pass there, but not NaN.
_FOUR_BIT_GROUPS = edge_case(S=257, D=128, H_q=8, H_kv=2, bits=4, group_size=64, mask="additive")
QUERY_RANGE_CASES = [
    _queries_scaled(_FOUR_BIT_GROUPS, [1e-30, 1e-10, 1e-3, 1.0, 7.0, 1e3, 1e10, 1e30]),
    _queries_scaled(_FOUR_BIT_GROUPS, [1e-38, 1.0, 3e4, 1.0, 1e-5, 1.0, 0.0, 1.0],
                    np.where(np.arange(128) % 3 == 0, 1e-20, 1.0)),
    _queries_scaled(edge_case(S=130, D=64, H_q=8, H_kv=1, bits=8, group_size=32, dtype=mx.float16),
                    [1e-6, 1e-2, 1.0, 10.0, 100.0, 1e3, 3e3, 0.0]),
    _queries_scaled(edge_case(S=129, D=128, H_q=4, H_kv=1, bits=2, group_size=64), [1e-20, 1.0, 1e20, 3.0]),
]


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("case", QUERY_RANGE_CASES, ids=["heads", "heads_and_dims", "f16_8bit", "2bit"])
def test_emulated_quantized_query_ranges(layout, case):
    with emulated_gpu(layout):
        assert schedule.uses_mma(case.dtype, case.dims[-1], quantized=True, single_pass=False, block=0)
        check_parity(case, "cuda")


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pytest.mark.parametrize("single_pass_max_s", [4096, 0], ids=["one_block", "split"])
def test_emulated_quantized_climbing_scores(single_pass_max_s, layout):
    """Rows whose max climbs from tile to tile by steps around 2^8 (strategies.climbing_case), in
    one block and across 256-key blocks: every rescale of the output, the denominator and the V
    bias term lands where it should (one of the three missed would be off by the scale of V)."""
    with emulated_gpu(layout), policy_override(single_pass_max_s=single_pass_max_s):
        check_parity(climbing_case(), "cuda")


@pytest.mark.parametrize("simdgroups", [1, 2, 4, 8])
@pinned(MMA_CASES[:2] + PLAIN_MMA_CASES[:2])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_matrices_with_other_simdgroups(simdgroups, case):
    """The matrix kernel's split threadgroups with 1, 2 (the 4-bit default), 4 (the plain default)
    and 8 simdgroups (the most 233 registers a lane allow an SM), quantized and plain, NVIDIA's
    layout: fewer simdgroups take more tiles each and merge fewer states through threadgroup
    memory; 8 was timed on the H200 and was no faster (commit d205b41: docs/h200/plain-pieces/), so it stays a
    checked alternative, not a default."""
    with emulated_gpu("nvidia"), policy_override(quantized_mma_simdgroups=simdgroups, plain_mma_simdgroups=simdgroups,
                                               single_pass_max_s=0, plain_mma_min_block=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


def _transposed(case):
    """`case` with K and V read through swapaxes of (..., D, S) buffers (D the strided axis)."""
    k, v = (kv_layout(np.array(x.astype(mx.float32)), case.dtype, "transposed", None) for x in (case.k, case.v))
    return dataclasses.replace(case, k=k, v=v)


# Arrays whose offsets fa_narrow_rows rejects: quantized K/V in the "strided" layout (codes' words S
# apart, biases' rows longer than the scales'), plain K/V with D the strided axis.
WIDE_OFFSET_CASES = [
    edge_case(S=257, D=128, H_q=32, H_kv=2, bits=4, group_size=32, mask="bool_hidden_row", layout="strided"),
    edge_case(S=33, D=64, L=3, H_q=8, H_kv=2, bits=8, group_size=64, mask="causal", dtype=mx.float16,
              layout="strided"),
    edge_case(S=200, D=32, H_q=8, H_kv=8, bits=2, group_size=32, key_ranges=[[150, 50], [0, 1]], layout="strided"),
    _transposed(PLAIN_MMA_CASES[0]),
    _transposed(PLAIN_MMA_CASES[1]),
]


@pinned(WIDE_OFFSET_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_matrices_with_64_bit_offsets(case):
    """The matrix kernel's other pass, quantized and plain: 64-bit products of every array's
    strides, which the kernel takes for arrays fa_narrow_rows rejects (these layouts); split,
    with cuda_compat.h's layout."""
    with emulated_gpu("nvidia"), policy_override(single_pass_max_s=0, plain_mma_min_block=0):
        assert schedule.uses_mma(case.dtype, case.dims[-1], quantized=case.bits is not None, single_pass=False,
                                 block=0)
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@contextlib.contextmanager
def _offsets32_off():
    """Kernels compiled with OFFSETS32 false for the block: every array takes the 64-bit pass."""
    def wide(body_file, defines=(), launch_bounds=None, constants=(), **kwargs):
        constants = tuple((name, False if name == "OFFSETS32" else value) for name, value in constants)
        return SOURCES(body_file, defines, launch_bounds, constants, **kwargs)

    sources.kernel_sources = wide
    try:
        yield
    finally:
        sources.kernel_sources = SOURCES


@pinned(MMA_CASES[:3] + PLAIN_MMA_CASES[:3])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_matrices_with_64_bit_offsets_on_packed_rows(case):
    """The same pass over rows it still loads whole (contiguous elements), as the GPU takes it for
    a head's rows past 2^31 elements, too large to emulate: compiled here with OFFSETS32 false."""
    with emulated_gpu("nvidia"), _offsets32_off(), policy_override(single_pass_max_s=0, plain_mma_min_block=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pinned(pinned_quantized_cases() + MMA_CASES[:2])
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_without_matrices(case):
    """decode_attention.metal keeps f32 queries and D > 128: f16 / bf16 cases through it too."""
    with emulated_gpu(), policy_override(quantized_mma_max_d=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


# The matrix kernel's 32-bit operand forms (tf32 on NVIDIA), which the schedule gives the formats
# whose codes 16-bit operands cannot hold: scores for 8-bit codes with bf16 queries and for 2-bit
# codes in groups of 32 (a lane's codes of a group less than a word; schedule.score_mantissa);
# outputs for 8-bit codes (one code an operand, k = 8; schedule.out_mantissa).
_EIGHT_BIT_BF16 = edge_case(S=129, D=128, H_q=4, H_kv=2, bits=8, group_size=64, mask="causal", L=2)
SCORES32_CASES = [
    MMA_CASES[2],
    _EIGHT_BIT_BF16,
    edge_case(S=47, D=64, H_q=8, H_kv=1, bits=2, group_size=32, dtype=mx.float16, mask="bool_hidden_row"),
]
OUT32_CASES = [
    MMA_CASES[1],  # with 16-bit scores (f16)
    _EIGHT_BIT_BF16,
    edge_case(S=200, D=32, H_q=8, H_kv=8, bits=8, group_size=32, key_ranges=[[150, 50], [0, 1]]),
]


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pinned(SCORES32_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_matrices_with_32_bit_scores(layout, case):
    """The score product's 32-bit form, on the formats that take it; split."""
    assert schedule.score_mantissa(case.dtype, case.bits, case.group_size) == 0
    with emulated_gpu(layout), policy_override(single_pass_max_s=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pytest.mark.parametrize("layout", ["apple", "nvidia"])
@pinned(OUT32_CASES)
@settings(phases=[Phase.explicit])
@given(case=short_cases())
def test_emulated_quantized_matrices_with_32_bit_outputs(layout, case):
    """The output product's 32-bit form (V codes one an operand), on 8-bit codes; split."""
    assert schedule.out_mantissa(case.bits) == 0
    with emulated_gpu(layout), policy_override(single_pass_max_s=0):
        check_parity(case, "cuda")
        check_property("batch_invariance", case, "cuda")


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
@pytest.mark.parametrize("S", [40, 700], ids=["one_block", "split"])
def test_emulated_replay_equals_a_fresh_set_up(quantized, S):
    """A repeated call runs the launcher its first call kept (backends.replay): with other arrays
    of the same signature, bit for bit what a call set up afresh gives."""
    def call(seed):
        mx.random.seed(seed)
        q = mx.random.normal((2, 8, 1, 64)).astype(mx.float16)
        k, v = (mx.random.normal((2, 2, S + 5, 64)).astype(mx.float16)[:, :, :S] for _ in range(2))
        if quantized:
            k, v = fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
            return fa.quantized_decode_attention(q, k, v, group_size=32, scale=0.3, backend="cuda")
        return fa.decode_attention(q, k, v, scale=0.3, backend="cuda")

    with emulated_gpu():
        call(0)
        replayed = call(1)
        backends.forget_replays()
        fresh = call(1)
    assert mx.array_equal(replayed, fresh)
    assert not mx.array_equal(replayed, mx.zeros_like(replayed))


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_emulated_key_ranges_view(quantized, dtype):
    """An int32 key_ranges view (a column slice, junk between its columns) gives what its
    contiguous copy gives, on the first call and on its replay: the emulator hands the kernels
    each input's memory as MLX does, and the kernels read key_ranges row-major (without the
    contiguous copy of _problem._key_ranges this fails, as it did on the H200)."""
    mx.random.seed(3)
    q = mx.random.normal((2, 4, 1, 32)).astype(dtype)
    k, v = (mx.random.normal((2, 2, 40, 32)).astype(dtype) for _ in range(2))
    if quantized:
        k, v = fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
    view = mx.array([[2, -1, 30, -1], [0, -1, 40, -1]], dtype=mx.int32)[:, ::2]
    copy = mx.array(np.array(view))

    def attend(ranges):
        if quantized:
            return fa.quantized_decode_attention(q, k, v, group_size=32, key_ranges=ranges, backend="cuda")
        return fa.decode_attention(q, k, v, key_ranges=ranges, backend="cuda")

    with emulated_gpu():
        for _ in range(2):
            assert mx.array_equal(attend(view), attend(copy)).item()


@pytest.mark.parametrize("S", [40, 41, 300])
@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "q4"])
def test_emulated_padding_ranges_across_S(quantized, S):
    """One KeyRanges.from_padding over a cache growing from S keys: each step's bits are those of
    the (start, length) array of that step's S (the kernels end such a range `right` keys before
    S), on the first call, the replays and across the one-block / split schedules (S = 300)."""
    mx.random.seed(5)
    q = mx.random.normal((3, 4, 1, 32)).astype(mx.bfloat16)
    k, v = (mx.random.normal((3, 2, S + 3, 32)).astype(mx.bfloat16) for _ in range(2))
    if quantized:
        k, v = fa.quantize_kv(k, group_size=32), fa.quantize_kv(v, group_size=32)
    left, right = [5, 0, 17], [0, 3, 1]
    padded = KeyRanges.from_padding(left=left, right=right)

    def attend(ranges, keys):
        kv = [tuple(x[:, :, :keys] for x in t) if quantized else t[:, :, :keys] for t in (k, v)]
        if quantized:
            return fa.quantized_decode_attention(q, *kv, group_size=32, key_ranges=ranges, backend="cuda")
        return fa.decode_attention(q, *kv, key_ranges=ranges, backend="cuda")

    with emulated_gpu():
        for keys in range(S, S + 3):
            pairs = mx.array([[a, keys - a - b] for a, b in zip(left, right)], dtype=mx.int32)
            assert mx.array_equal(attend(padded, keys), attend(pairs, keys)).item(), keys
