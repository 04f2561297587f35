"""Kernel-source mutants: realistic one-line edits of metal/, each of which the CPU emulation must catch.

    python -m tests.kernels.kernel_mutants            # every mutant: caught or SURVIVED; exit 1 if any survives
    python -m tests.kernels.kernel_mutants --list
    python -m tests.kernels.kernel_mutants v_stride_of_k dropped_barrier
    python -m tests.kernels.kernel_mutants --summary  # also a markdown table to $GITHUB_STEP_SUMMARY (CI)

Each mutant is a text edit (`old` -> `new`, `count` occurrences of `old` in `file`) applied to the
kernel source as fusedattend.gpu reads it (sources.read_kernel_file), in memory only: nothing on
disk changes. It then runs its probes, small cases through the emulated GPU (cpu_emulator.py)
with a schedule that takes the kernel it edits, checked for oracle parity and batch invariance.
A mutant is caught when a check fails or the kernel faults on a guard page (guarded_memory.py).
The same probes must pass the unmutated sources (tests/kernels/test_kernel_mutants.py).

The edits are anchored on code that changes rarely (strides, indices, loop bounds, barriers),
not on the merge's or the hidden keys' arithmetic. When an anchor no longer matches (the kernel
was rewritten there), MutantAnchorLost says which: move the mutant onto the new code.

What each probe case needs to catch its mutants (emulated_layouts.py): K and V slices of caches
with different numbers of spare keys and heads (V stepped with K's strides), a mask whose keys
lie 2 apart or transposed (a mask read with stride 1), G > 1 and H_kv > 1 (an interleaved GQA
mapping), L > 1 (query strides swapped), S past one block with the last block partial (block
edges; a read past the block's end faults on the guard page after the last head's keys), 8 query
rows over 4 simdgroups and a random fiber order (a barrier between simdgroups dropped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time

import mlx.core as mx

from fusedattend.gpu import sources
from tests.kernels.cpu_emulator import EmulatedFault, emulated_gpu
from tests.kernels.emulated_layouts import relaid
from tests.kernels.policy_override import policy_override
from tests.property.strategies import edge_case
from tests.property.conformance_adapter import check as check_property
from tests.property.test_online_softmax_parity import check_parity


class MutantAnchorLost(AssertionError):
    """A mutant's `old` text is no longer in its file as often as it says."""


@dataclasses.dataclass(frozen=True)
class KernelMutant:
    name: str
    file: str  # of metal/
    old: str
    new: str
    what: str
    probes: tuple  # names of PROBES that catch it
    count: int = 1  # occurrences of `old`, all replaced

    def apply(self, text: str) -> str:
        found = text.count(self.old)
        if found != self.count:
            raise MutantAnchorLost(f"mutant {self.name}: {self.old!r} occurs {found} times in metal/{self.file}, "
                                   f"not {self.count}: move the mutant onto the kernel's new code")
        return text.replace(self.old, self.new)


@dataclasses.dataclass(frozen=True)
class Probe:
    """Cases run through one kernel: `policy` routes them there; fiber_seed orders the fibers."""

    name: str
    what: str
    cases: object  # () -> list of Case
    policy: dict
    layout: str = "apple"
    fiber_seed: int = 1
    run: object = None  # () -> None, raising AssertionError: instead of the cases' parity checks


def _plain_cases():
    # bool mask (row 0 of each position hidden), keys 2 apart; K and V caches of their own sizes.
    base = edge_case(B=2, H_q=8, H_kv=2, L=2, S=300, D=64, mask="bool_hidden_row", noncontig=False, seed=3)
    return [relaid(base, "cache", "rows_padded", "keys_strided", seed=1)]


def _mma_cases():
    # additive mask read through a transposed (S, L) buffer; V's key rows padded.
    base = edge_case(B=2, H_q=8, H_kv=2, L=2, S=300, D=64, mask="additive", noncontig=False, seed=4)
    return [relaid(base, "cache_heads", "rows_padded", "transposed", seed=2)]


def _tiny_block_cases():
    # blocks of 2 keys, shorter than a step of the kernel's loop: 33 blocks, the last of 1 key.
    base = edge_case(B=2, H_q=8, H_kv=2, L=1, S=65, D=64, mask="additive", noncontig=False, seed=6)
    return [relaid(base, "cache", "cache_heads", "keys_strided", seed=4)]


def _window_run():
    """windowed_decode_attention's GPU form (two split launches, one merge of both launches'
    blocks): two requests, quantized keys over two blocks and windows of their own lengths,
    against the float64 oracle; request 1 alone gives the bits it gives in the batch."""
    import numpy as np

    import fusedattend as fa
    from fusedattend.conformance.grids import np_of
    from tests.parity.test_window_attention import TOLERANCE, _inputs, _oracle

    qr, wr = [(0, 300), (0, 290)], [(0, 9), (0, 5)]
    q, K, V, kw, vw = _inputs(2, 300, 16, 1, mx.float32, 4, seed=21)

    def attend(rows, qr, wr):
        return fa.windowed_decode_attention(q[rows], [x[rows] for x in K], [x[rows] for x in V], kw[rows], vw[rows],
                                            key_ranges=fa.KeyRanges(qr), window_ranges=fa.KeyRanges(wr),
                                            backend="cuda")

    out = attend(slice(0, 2), qr, wr)
    expected = _oracle(q, K, V, kw, vw, qr, wr, 4, causal=False)
    err = np.abs(np_of(out) - expected).max()
    assert err <= TOLERANCE[mx.float32] * max(1.0, np.abs(expected).max()), f"off the oracle by {err:.3g}"
    assert mx.array_equal(attend(slice(1, 2), qr[1:], wr[1:]), out[1:]), "request 1 alone differs from in the batch"


def _quantized_cases():
    base = edge_case(B=2, H_q=8, H_kv=2, L=2, S=300, D=64, mask="causal", bits=4, group_size=32, dtype=mx.float32,
                     seed=5)
    return [relaid(base, "cache", "rows_padded", "as_made", seed=3)]


PROBES = {p.name: p for p in [
    Probe("plain_split", "plain bf16 K/V on decode_attention.metal, 2 blocks of 256 keys merged by merge_partials.metal",
          _plain_cases, dict(single_pass_max_s=0, plain_mma_max_d=0)),
    Probe("plain_mma_split", "plain bf16 K/V on decode_mma.metal, 2 blocks of 256 keys",
          _mma_cases, dict(single_pass_max_s=0, plain_mma_min_block=0)),
    Probe("plain_tiny_blocks", "plain bf16 K/V on decode_attention.metal in blocks of 2 keys, 33 of them merged",
          _tiny_block_cases, dict(single_pass_max_s=0, min_block=1, target_blocks=64, plain_mma_max_d=0)),
    Probe("quantized_split", "4-bit K/V, f32 queries, on decode_attention.metal, 2 blocks",
          _quantized_cases, dict(single_pass_max_s=0)),
    Probe("window_split", "4-bit keys then a full-precision window (f32): two split launches, one merge",
          None, {}, run=_window_run),
]}

ATT, MMA, HDR, MERGE = "decode_attention.metal", "decode_mma.metal", "decode_attention.h", "merge_partials.metal"
MUTANTS = {m.name: m for m in [
    KernelMutant("v_stride_of_k", ATT, "fa_load_chunk<E>(v_row + int64_t(j) * v_strides5[3]",
                 "fa_load_chunk<E>(v_row + int64_t(j) * k_strides5[3]", "V's keys stepped with K's key stride",
                 ("plain_split",)),
    KernelMutant("quantized_v_scales_stride_of_k", ATT, "vs_row[int64_t(j) * v_scales_strides5[3]]",
                 "vs_row[int64_t(j) * k_scales_strides5[3]]", "quantized V's scales stepped with K's scales' stride",
                 ("quantized_split",)),
    KernelMutant("mma_v_stride_of_k", HDR, "fa_key_offset(narrow, v_strides, col_key)",
                 "fa_key_offset(narrow, k_strides, col_key)",
                 "the matrix kernel's plain V tiles loaded with K's strides", ("plain_mma_split",)),
    KernelMutant("mask_keys_stride_1", HDR, "mask[mask_row + int64_t(key) * mask_strides[4]]",
                 "mask[mask_row + int64_t(key)]", "the mask read along its keys with stride 1",
                 ("plain_split", "plain_mma_split")),
    KernelMutant("q_position_stride_of_heads", ATT, "(rr % L) * q_strides5[3]", "(rr % L) * q_strides5[2]",
                 "a query row's position stepped with the head stride", ("plain_split",)),
    KernelMutant("gqa_interleaved", ATT, "const int head = kv_head * G + rr / L;",
                 "const int head = kv_head + rr / L * (H_q / G);",
                 "query head h served by kv head h % H_kv instead of h / G", ("plain_split",), count=3),
    KernelMutant("mma_gqa_interleaved", MMA, "#define FA_ROW_HEAD(r) (kv_head * G + (FA_ROW_LIVE(r) ? FA_ROW(r) : 0) / L)",
                 "#define FA_ROW_HEAD(r) (kv_head + (FA_ROW_LIVE(r) ? FA_ROW(r) : 0) / L * (H_q / G))",
                 "the matrix kernel's query head h served by kv head h % H_kv", ("plain_mma_split",)),
    KernelMutant("block_end_one_short", HDR, "grid.block * grid.block_keys + grid.block_keys, at.key_end",
                 "grid.block * grid.block_keys + grid.block_keys - 1, at.key_end",
                 "a block's keys end one key early (its last key lost)", ("plain_split", "plain_mma_split")),
    KernelMutant("block_end_one_past", HDR, "bool visible = key < hi &&", "bool visible = key <= hi &&",
                 "the key at a block's end counted as visible (its slot reads the block's last key again)",
                 ("plain_tiny_blocks",)),
    KernelMutant("read_past_block_end", ATT, "const int last_readable = metal::max(hi, 1) - 1;",
                 "const int last_readable = metal::max(hi, 1);",
                 "keys past the block read one key past its end (then masked: only the guard page sees it)",
                 ("plain_split",)),
    KernelMutant("mma_read_past_block_end", MMA, "const int last_readable = metal::max(hi, 1) - 1;",
                 "const int last_readable = metal::max(hi, 1);",
                 "the matrix kernel's tiles read one key past the block's end (then masked)", ("plain_mma_split",)),
    KernelMutant("missing_rescale", ATT, "const float row_rescale = FA_FROM_HOLDER(rescale, r);",
                 "const float row_rescale = FA_FROM_HOLDER(rescale, r) * 0.0f + 1.0f;",
                 "the output accumulators not rescaled when a row's max grows (the denominator is)", ("plain_split",)),
    KernelMutant("mma_missing_rescale", MMA, "row_sum[j] *= rescale;", "",
                 "the matrix kernel's denominators not rescaled when a row's max moves (the outputs are)",
                 ("plain_mma_split",)),
    KernelMutant("dropped_barrier", ATT, "threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous row has been read",
                 "// (barrier dropped)",
                 "the simdgroups' merge writes a row's state before every simdgroup read the previous row's "
                 "(shuffles in between: only a random fiber order shows it)", ("plain_split",)),
    KernelMutant("mma_dropped_barrier", MMA, "threadgroup_barrier(mem_flags::mem_threadgroup);", "",
                 "the matrix kernel's simdgroups merge before every one wrote its state", ("plain_mma_split",)),
    KernelMutant("merge_block_stride", MERGE, "#define FA_OUT(i) o_row[int64_t(i) * D]",
                 "#define FA_OUT(i) o_row[int64_t(i)]",
                 "merge_partials.metal steps the blocks' partial outputs by 1 instead of D", ("plain_split",)),
    KernelMutant("merge_window_first_block", MERGE, "#define FA_STATE(i, k) ((i) < NB_Q ?",
                 "#define FA_STATE(i, k) ((i) <= NB_Q ?",
                 "the merge of two launches reads the window's first block state from past the quantized blocks",
                 ("window_split",)),
    KernelMutant("merge_window_row_stride", MERGE, "const auto o_w = out_window + row * (NB - NB_Q) * D + d;",
                 "const auto o_w = out_window + row * NB * D + d;",
                 "the window launch's rows stepped by all the blocks, not its own", ("window_split",)),
]}


@contextlib.contextmanager
def mutated(mutant: KernelMutant):
    """fusedattend.gpu reads `mutant`'s file with its edit, for the block (in memory only)."""
    real = sources.read_kernel_file

    def read(name):
        text = real(name)
        return mutant.apply(text) if name == mutant.file else text

    sources.read_kernel_file = read
    try:
        yield
    finally:
        sources.read_kernel_file = real


def run_probe(probe: Probe):
    """None where every case passes, else what failed (a check's message or a fault)."""
    def checks():
        if probe.run is not None:
            yield probe.run
        for case in probe.cases() if probe.cases else ():
            yield lambda: (check_parity(case, "cuda"), check_property("batch_invariance", case, "cuda"))

    with emulated_gpu(probe.layout, fiber_seed=probe.fiber_seed), policy_override(**probe.policy):
        for check in checks():
            try:
                check()
            except (AssertionError, EmulatedFault) as e:
                if isinstance(e, MutantAnchorLost):
                    raise
                return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return None


def catches(mutant: KernelMutant):
    """(probe, what failed) of the first of the mutant's probes that catches it, or None."""
    with mutated(mutant):
        for name in mutant.probes:
            failure = run_probe(PROBES[name])
            if failure is not None:
                return name, failure
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list" in argv:
        for m in MUTANTS.values():
            print(f"{m.name:32s} metal/{m.file}: {m.what}")
        return 0
    chosen = [a for a in argv if not a.startswith("-")] or list(MUTANTS)
    unknown = [a for a in chosen if a not in MUTANTS]
    if unknown:
        raise SystemExit(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(MUTANTS)}")
    survived, rows = [], []
    for name in chosen:
        t = time.time()
        caught = catches(MUTANTS[name])
        verdict = f"caught by {caught[0]}: {caught[1][:160]}" if caught else "SURVIVED"
        print(f"{name:32s} {verdict}  ({time.time() - t:.0f}s)", flush=True)
        if caught is None:
            survived.append(name)
        how = f"{caught[0]}: {caught[1].split(':')[0]}" if caught else "**SURVIVED**"
        rows.append(f"| `{name}` | metal/{MUTANTS[name].file} | {MUTANTS[name].what} | {how} |")
    total = (f"{len(chosen) - len(survived)} of {len(chosen)} kernel mutants caught"
             + (f"; survived: {', '.join(survived)}" if survived else ""))
    print(total)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if "--summary" in argv and summary:
        with open(summary, "a") as f:
            f.write("\n".join(["### Kernel-source mutants", "", total, "", "| mutant | file | edit | caught by |",
                               "|---|---|---|---|", *rows, ""]) + "\n")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
