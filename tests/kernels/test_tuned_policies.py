"""Batch invariance under every policy `python -m fusedattend tune` can write (fusedattend/tune.py).

Two parts. For the schedule (no kernel runs): under single-field changes of every candidate and
drawn combinations of the whole space, every launch constant that can change a result (kernel,
constants but the L2 prefetch distance, block keys, single pass or split) depends on S and the
formats only: the same for B = 1 and B = 5, one layer and three. And in the CPU emulation of the
kernels: drawn policies of the space give each request of a batch bit for bit its output alone,
and outputs within the oracle's tolerance.
"""

import dataclasses

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusedattend import tune
from fusedattend.gpu import schedule
from tests.kernels.cpu_emulator import compiler_available, emulated_gpu
from tests.kernels.policy_override import policy_override
from tests.property.strategies import attention_cases, examples, quantized_cases
from tests.property.conformance_adapter import check as check_property
from tests.property.test_online_softmax_parity import check_parity


@st.composite
def tuned_policies(draw):
    """A policy the tuner may write: any candidate of each field, over Policy()."""
    values = {field: draw(st.sampled_from(candidates)) for field, candidates in tune.TUNABLE.items()}
    policy = dataclasses.replace(schedule.Policy(), **values)
    if not tune.valid(policy):  # the tuner skips these (min_block > max_block)
        policy = dataclasses.replace(policy, min_block=policy.max_block)
    return policy


def _single_field_policies():
    return [dataclasses.replace(schedule.Policy(), **{f: v}) for f, c in tune.TUNABLE.items() for v in c
            if tune.valid(dataclasses.replace(schedule.Policy(), **{f: v}))]


FORMATS = [  # dtype, D, quantized, bits, group size, scales dtype
    (mx.bfloat16, 128, False, None, None, None), (mx.float32, 64, False, None, None, None),
    (mx.float16, 96, False, None, None, None), (mx.bfloat16, 128, True, 4, 64, mx.bfloat16),
    (mx.float16, 64, True, 8, 32, mx.float16), (mx.float32, 128, True, 2, 128, mx.float32),
]
LENGTHS = (1, 255, 300, 513, 1025, 4097, 40000)
BATCHES = ((1, 1, False), (1, 5, False), (3, 2, True))  # NL, B, layered


def _what_changes_results(sched):
    """The launch's parts that can change a result: all but the grid's batch axis, the outputs'
    batch axes, the L2 prefetch distance (a hint) and LAYERED (the inputs' form, not the math)."""
    constants = tuple(c for c in sched.constants if c[0] not in ("PREFETCH_TILES", "LAYERED"))
    merge = None if sched.merge is None else (sched.merge.constants, sched.merge.threadgroup)
    return sched.body_file, sched.single_pass, sched.defines, constants, sched.dims, sched.threadgroup, \
        sched.grid[:2], sched.launch_bounds, merge


def _check_schedule_invariance(policy):
    for dtype, D, quantized, bits, gs, scales_dtype in FORMATS:
        for S in LENGTHS:
            for mask_kind in ("none", "additive"):
                launches = {_what_changes_results(schedule.schedule_for(
                    (NL, B, 8, 2, 2, S, D), dtype, quantized=quantized, mask_kind=mask_kind, mask_dtype=dtype,
                    bits=bits, scales_dtype=scales_dtype, has_ranges=False, group_size=gs, layered=layered,
                    on_metal=False, policy=policy)) for NL, B, layered in BATCHES}
                assert len(launches) == 1, (policy, dtype, D, quantized, S, launches)


@pytest.mark.parametrize("policy", _single_field_policies(), ids=lambda p: str(
    {f: getattr(p, f) for f in tune.TUNABLE if getattr(p, f) != getattr(schedule.Policy(), f)}))
def test_single_field_policies_schedule_by_S_and_format_only(policy):
    _check_schedule_invariance(policy)


@settings(max_examples=40, deadline=None)
@given(policy=tuned_policies())
def test_tuned_policies_schedule_by_S_and_format_only(policy):
    _check_schedule_invariance(policy)


@st.composite
def _short_cases(draw):
    S = draw(st.sampled_from((1, 17, 129, 257, 600)))
    if draw(st.booleans()):
        return draw(quantized_cases(S=S))
    return draw(attention_cases(S=S, max_B=3, max_NL=2))


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")
@examples(0.1)
@given(policy=tuned_policies(), case=_short_cases())
def test_emulated_kernels_under_tuned_policies(policy, case):
    """Each drawn policy, scaled down so that short S reach its splits (the block sizes and the
    one-launch threshold divided by 16; every other field as drawn), through the emulated
    kernels: batch invariance bit for bit and oracle parity."""
    small = {f: max(1, getattr(policy, f) // 16) for f in ("single_pass_max_s", "min_block", "max_block",
                                                           "plain_mma_min_block", "plain_long_blocks_from_s")}
    fields = {**{f: getattr(policy, f) for f in tune.TUNABLE}, **small}
    with emulated_gpu(), policy_override(**fields):
        check_property("batch_invariance", case, "cuda")
        check_parity(case, "cuda")


def _shrunk(policy):
    """`policy` with its block sizes and one-launch threshold divided by 16 (short S split)."""
    return dataclasses.replace(policy, **{f: max(1, getattr(policy, f) // 16) for f in (
        "single_pass_max_s", "min_block", "max_block", "plain_mma_min_block", "plain_long_blocks_from_s")})


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")
def test_tune_end_to_end_on_the_emulated_gpu(tmp_path, capsys):
    """The tuner's GPU path as it runs on a chip (workload, timings, the check, the file), on the
    emulated kernels: a tiny workload, one field, from a shrunk policy so that its check's block
    edges stay short. (The timings mean nothing here; what runs is the code.)"""
    out = tmp_path / "emulated.json"
    start = _shrunk(schedule.Policy())
    with emulated_gpu(), policy_override(**dataclasses.asdict(start)):
        assert tune.main(["--backend", "cuda", "--B", "1", "--S", "20", "--formats", "bfloat16",
                          "--fields", "single_pass_simdgroups", "--passes", "1", "--repeats", "1", "--inner", "1",
                          "--min-gain", "0.5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("batch == requests alone: True") == text.count("  check ") >= 5 and "wrote" in text
    written = schedule.load_policy(str(out))
    assert {f: getattr(written, f) for f in tune.TUNABLE if f != "single_pass_simdgroups"} == \
        {f: getattr(start, f) for f in tune.TUNABLE if f != "single_pass_simdgroups"}
