"""How a decode problem is launched on the GPU: a pure function of its shape, formats and a Policy.

Nothing here compiles or launches (launch.py does); this module only decides. `Policy` holds
every tunable of the schedule; `schedule_for` turns a problem's shape and formats into a frozen
`Schedule` (kernel file, name, compile-time constants, defines, launch bounds, grid, outputs and
the merge launch). Each Policy field is stated as a goal, one worked example and the rule; the
measurements behind the values are in docs/decisions/schedule-*.md.

Correctness rules the schedule keeps:
- Batch invariance: the key blocks, the kernel and every constant that changes a result depend
  on S and the formats only, never on B or NL, so a request's output is bit-identical in any
  batch. Only hints that change no result (L2 prefetch distances) may look at the grid.
- Policy() is the shipped schedule. A chip's tuned policy (`python -m fusedattend tune`, which
  writes policies/<chip id>.json beside this module, or FUSEDATTEND_POLICY_DIR's folder) replaces
  fields of it on that chip; without such a file the schedule is Policy(). FUSEDATTEND_SCHEDULE=
  path.json overrides both (a JSON object of field names to values over Policy(); "default": Policy()
  itself), read once a process per path: a schedule sweep or a test points the variable at another
  file to try another policy. Keys starting with "_" are notes (the tuner's), not fields.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from pathlib import Path
from typing import Optional

import mlx.core as mx

SCHEDULE_ENV = "FUSEDATTEND_SCHEDULE"
POLICY_DIR_ENV = "FUSEDATTEND_POLICY_DIR"
SIMD_WIDTH = 32
MAX_GRID_Z = 65535  # CUDA's limit on gridDim.z (the layer x request axis)
MMA_ROWS = 8  # query rows of a decode_mma.metal threadgroup: the matrices' rows
# decode_mma.metal over plain K/V loads a lane's runs of D / 4 and D / 8 elements as whole
# vectors, so it needs D a multiple of this (a kernel requirement, not a tuning choice).
PLAIN_MMA_D_MULTIPLE = 32
MASK_KINDS = {"none": 0, "causal": 1, "bool": 2, "additive": 3}
PLAIN_INPUTS = ("q", "k", "v")
QUANTIZED_INPUTS = ("q", "k_codes", "k_scales", "k_biases", "v_codes", "v_scales", "v_biases")
COMMON_INPUTS = ("mask", "key_ranges", "dims", "scalars")


@dataclasses.dataclass(frozen=True)
class Policy:
    """Every tunable of the GPU schedule. Policy() is the shipped one (H200-tuned)."""

    # --- One launch or two (docs/decisions/schedule-single-pass.md)
    # Goal: skip the merge launch where one threadgroup per (request, kv head, row tile) can
    # still draw the bandwidth. Example: S = 512 runs as one block (one launch); S = 513 splits.
    # Rule: S <= single_pass_max_s takes one block of all S keys, else split blocks (0: always
    # split). Depends on S only.
    single_pass_max_s: int = 512

    # --- Split block size (docs/decisions/schedule-split-blocks.md)
    # Goal: enough blocks per (request, kv head) to fill the GPU at B = 1, each long enough to
    # amortise its merge. Example: S = 4096 -> ceil(4096 / 32) = 128 -> clamped to 256 keys
    # (16 blocks). Rule: the power of two at least S / target_blocks, within [min_block,
    # max_block]. Depends on S and the format only, never on B or NL.
    target_blocks: int = 32
    min_block: int = 256
    max_block: int = 1024
    # Goal: plain f16 / bf16 K/V on the matrix kernel draw the bandwidth with long blocks
    # (docs/decisions/schedule-plain-long-blocks.md). Example: bf16, D = 128, S = 2048 -> 1024-key
    # blocks (2 blocks) on decode_mma.metal; S = 32768 -> 2048-key blocks (16 blocks). Rule: from
    # plain_long_blocks_from_s keys on, max_block keys; from plain_longer_blocks_from_s on,
    # plain_longer_block keys. Quantized K/V keep the rule above.
    plain_long_blocks_from_s: int = 513
    plain_longer_blocks_from_s: int = 32768
    plain_longer_block: int = 2048

    # --- Which kernel (docs/decisions/schedule-matrix-kernel.md)
    # Goal: the simdgroup-matrix kernel (decode_mma.metal; tensor cores on NVIDIA) where it issues
    # fewer instructions and still keeps enough loads in flight. Example: bf16 K/V, D = 128,
    # S = 8192 with 1024-key blocks -> decode_mma.metal; with 256-key blocks ->
    # decode_attention.metal. Rule: f16 / bf16 queries with D <= quantized_mma_max_d (quantized)
    # or D <= plain_mma_max_d and a multiple of 32 (plain) take it, plain ones in one block or in
    # split blocks of at least plain_mma_min_block keys; f32 queries never (not exact in the
    # operands). 0 for a max_d routes that format to decode_attention.metal. At most 128: larger
    # output tiles do not fit the registers.
    quantized_mma_max_d: int = 128
    plain_mma_max_d: int = 128
    plain_mma_min_block: int = 1024

    # --- Simdgroups of a threadgroup (docs/decisions/schedule-simdgroups.md)
    # Goal: enough warps per block when layers wait for one another (B = 1 latency) without
    # losing large batches. Example: a split bf16 block on decode_attention.metal runs 4
    # simdgroups (128 threads); a split 4-bit block on decode_mma.metal 2. Rule: one block:
    # single_pass_simdgroups (at most 8: registers); split: simdgroups on decode_attention.metal,
    # quantized_mma_simdgroups / plain_mma_simdgroups on decode_mma.metal.
    simdgroups: int = 4
    quantized_mma_simdgroups: int = 2
    plain_mma_simdgroups: int = 4
    single_pass_simdgroups: int = 4

    # --- decode_attention.metal's register tiling (docs/decisions/schedule-keys-in-flight.md)
    # Goal: a lane holds E elements of a row and ROWS query rows, within max_row_elements floats.
    # Example: G * L = 4 rows, D = 128 -> ROWS = 4, E = 8. Rule: ROWS = min(next pow2 of G * L,
    # max_rows); E = max(pow2 >= D / 32, min(elements_per_lane, max_row_elements / ROWS)); then
    # ROWS = min(ROWS, max_row_elements / E).
    elements_per_lane: int = 8
    max_rows: int = 8
    max_row_elements: int = 32
    # Goal: enough loads in flight per lane: one-block launches have few threadgroups, so they
    # load more keys ahead. Example: bf16, E = 8 (16 bytes a row): split U = 32 / 16 = 2 keys,
    # one block U = 64 / 16 = 4. Rule: U = clamp(bytes / (E * itemsize), 1, max_keys_in_flight);
    # quantized K/V take quantized_keys_in_flight.
    key_bytes_in_flight: int = 32
    single_pass_key_bytes_in_flight: int = 64
    max_keys_in_flight: int = 4
    quantized_keys_in_flight: int = 4

    # --- Threadgroups an SM for ptxas (CUDA __launch_bounds__; docs/decisions/schedule-threadgroups-per-sm.md)
    # Goal: more resident warps for split blocks (which fill the GPU) where the register cap
    # spills little. Example: bf16 split on decode_attention.metal: 4 an SM (128 registers);
    # 4-bit, 2 groups a row, 1024-key blocks on decode_mma.metal: 6 an SM. Rule: 0 leaves
    # ptxas' choice; one-block launches and quantized K/V on decode_attention.metal always 0; the
    # quantized matrix kernel takes a cap only for bits <= quantized_mma_bounded_max_bits and
    # D / group_size <= quantized_mma_bounded_max_groups. A cap changes registers, never results.
    split_threadgroups_per_sm: int = 4
    quantized_mma_threadgroups_per_sm: int = 6
    plain_mma_threadgroups_per_sm: int = 0
    quantized_mma_bounded_max_bits: int = 4
    quantized_mma_bounded_max_groups: int = 2

    # --- Short quantized blocks (docs/decisions/schedule-quantized-short-blocks.md)
    # Goal: short blocks spend their time starting and ending: more of them an SM, and their tiles
    # asked into L2 ahead. Example: 4-bit, S = 8192 (256-key blocks) -> 8 an SM and 2 tiles of
    # prefetch where it does not stage. Rule: a split block of at most quantized_short_block keys
    # (a function of S) takes quantized_short_block_threadgroups_per_sm and
    # quantized_short_block_prefetch_tiles (0 while staged).
    quantized_short_block: int = 512
    quantized_short_block_threadgroups_per_sm: int = 8
    quantized_short_block_prefetch_tiles: int = 2
    # Goal: quantized split tiles staged through threadgroup memory (cp.async) STAGES ahead
    # (docs/decisions/schedule-quantized-stages.md). Example: D = 128, 4 bits, group 64, bf16
    # scales (4 bytes a key and array) on CUDA -> 2.
    # Rule: split only, codes in whole 16-byte pieces and 4, 8 or 16 bytes of scales a key; on
    # Apple only if stage_on_metal (Apple's copies are plain loads: not measured there, off).
    quantized_stages: int = 2
    quantized_short_block_stages: int = 2
    stage_on_metal: bool = False

    # --- Plain prefetch (docs/decisions/schedule-plain-prefetch.md)
    # Goal: small grids walk their tiles as one chain of loads: ask tiles ahead into L2. Example:
    # B = 1, S = 2048, bf16 (2 blocks x 8 heads x 4 tiles = 64 threadgroups) -> 4 tiles ahead;
    # B = 16 (1024 threadgroups) -> none. Rule: split plain blocks on decode_mma.metal in a launch
    # of at most plain_prefetch_max_threadgroups take plain_prefetch_tiles. A hint changes no
    # result, so this one may depend on the grid (on B).
    plain_prefetch_tiles: int = 4
    plain_prefetch_max_threadgroups: int = 128

    # --- The window path's blocks (fusedattend/window_gpu.py; docs/decisions/quantized-window-cache.md)
    # Goal: a request's blocks over its quantized keys and its window independent of the buffers
    # around it, whose length is the batch's longest request's. Example: 256 keys -> a request of
    # 8064 quantized keys has 32 blocks a kv head, beside a request of 100 or of 30000. Rule:
    # every split block of both launches holds window_block keys, whatever S and B (a power of
    # two). Correctness: any value keeps a request's bits the same in every batch under it; a
    # request's bits change with it.
    window_block: int = 256


POLICY_FIELDS = {field.name: field.type for field in dataclasses.fields(Policy)}
# Fields that divide, size a loop or count simdgroups: 0 would divide by zero or launch nothing
# (a 0 elsewhere turns a rule off: quantized_short_block, the *_max_d, prefetch tiles, stages).
POSITIVE_FIELDS = frozenset((
    "target_blocks", "min_block", "max_block", "plain_longer_block",
    "simdgroups", "quantized_mma_simdgroups", "plain_mma_simdgroups", "single_pass_simdgroups",
    "elements_per_lane", "max_rows", "max_row_elements", "key_bytes_in_flight",
    "single_pass_key_bytes_in_flight", "max_keys_in_flight", "quantized_keys_in_flight", "window_block"))
MAX_SIMDGROUPS = 32  # 1024 threads a threadgroup, the most Metal and CUDA launch


def load_policy(path: str) -> Policy:
    """Policy() with the fields of the JSON object in `path` replaced. ValueError naming the file
    and the field for an unknown field or a value of the wrong type."""
    try:
        with open(path) as f:
            values = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{SCHEDULE_ENV}={path}: cannot read a JSON object ({e})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{SCHEDULE_ENV}={path}: must hold a JSON object of Policy fields, got {type(values).__name__}")
    values = {name: value for name, value in values.items() if not name.startswith("_")}  # notes
    for name, value in values.items():
        if name not in POLICY_FIELDS:
            raise ValueError(f"{SCHEDULE_ENV}={path}: {name!r} is not a Policy field")
        wanted = POLICY_FIELDS[name]
        if wanted == "bool" and not isinstance(value, bool):
            raise ValueError(f"{SCHEDULE_ENV}={path}: field {name!r} must be true or false, got {value!r}")
        if wanted == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{SCHEDULE_ENV}={path}: field {name!r} must be a non-negative integer, got {value!r}")
        if name in POSITIVE_FIELDS and value == 0:
            raise ValueError(f"{SCHEDULE_ENV}={path}: field {name!r} must be at least 1, got 0")
        if name.endswith("simdgroups") and value > MAX_SIMDGROUPS:
            raise ValueError(f"{SCHEDULE_ENV}={path}: field {name!r} must be at most {MAX_SIMDGROUPS}, got {value!r}")
    policy = Policy(**values)
    if policy.window_block & (policy.window_block - 1):
        raise ValueError(f"{SCHEDULE_ENV}={path}: field 'window_block' must be a power of two, "
                         f"got {policy.window_block}")
    if policy.min_block > policy.max_block:
        raise ValueError(f"{SCHEDULE_ENV}={path}: min_block ({policy.min_block}) must not exceed max_block "
                         f"({policy.max_block})")
    return policy


_POLICIES = {}  # env values -> Policy: each file is read once a process


def policy_dir() -> Path:
    """Where chips' tuned policies are filed: FUSEDATTEND_POLICY_DIR, else policies/ here."""
    return Path(os.environ.get(POLICY_DIR_ENV) or Path(__file__).with_name("policies"))


def chip_policy_path(chip: Optional[str] = None) -> Path:
    """The tuned policy file of `chip` (default: this machine's, fusedattend.chip.chip_id)."""
    if chip is None:
        from fusedattend.chip import chip_id

        chip = chip_id()
    return policy_dir() / f"{chip}.json"


def _chip_policy() -> Policy:
    """This chip's tuned policy, or Policy() where it has none (the chip is named only where
    some policy is filed: naming it runs system tools on macOS)."""
    folder = policy_dir()
    if not folder.is_dir() or not any(folder.glob("*.json")):
        return Policy()
    path = chip_policy_path()
    return load_policy(str(path)) if path.is_file() else Policy()


def current_policy() -> Policy:
    """The policy in force: FUSEDATTEND_SCHEDULE's file ("default": Policy()), else this chip's
    tuned policy, else Policy() (each read once a process)."""
    path = os.environ.get(SCHEDULE_ENV, "").strip()
    key = (path, "" if path else os.environ.get(POLICY_DIR_ENV, ""))
    policy = _POLICIES.get(key)
    if policy is None:
        if path == "default":
            policy = Policy()
        else:
            policy = load_policy(path) if path else _chip_policy()
        policy = _POLICIES[key] = policy
    return policy


@dataclasses.dataclass(frozen=True)
class MergeSchedule:
    """merge_partials.metal's launch, for split problems."""

    constants: tuple
    grid: tuple
    threadgroup: tuple
    output_shapes: tuple
    output_dtypes: tuple


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A problem's launches, from everything but its arrays."""

    name: str  # launch.py appends a digest of the compiled text
    body_file: str
    single_pass: bool  # one block: the decode kernel writes the output, no merge
    input_names: tuple
    output_names: tuple
    defines: tuple
    constants: tuple  # the body's compile-time constants (sources.constant_lines)
    launch_bounds: Optional[tuple]  # (threads, threadgroups an SM), CUDA only
    dims: tuple  # the kernels' int32 input: L, G, keys of a block, has_ranges, group_size
    grid: tuple
    threadgroup: tuple
    output_shapes: tuple
    output_dtypes: tuple
    merge: Optional[MergeSchedule]


def block_keys(S: int, *, plain_matrix: bool = False, policy: Optional[Policy] = None) -> int:
    """Keys per split block (a power of two, or plain_longer_block): of S and the format only."""
    p = policy or current_policy()
    if plain_matrix and S >= p.plain_long_blocks_from_s:
        return p.plain_longer_block if S >= p.plain_longer_blocks_from_s else p.max_block
    return min(p.max_block, max(p.min_block, _pow2_at_least(math.ceil(S / p.target_blocks))))


def split_blocks(S: int, *, plain_matrix: bool, policy: Optional[Policy] = None) -> tuple:
    """(keys of a block, blocks) of S keys split."""
    block = block_keys(S, plain_matrix=plain_matrix, policy=policy)
    return block, -(-S // block)


def uses_mma(dtype, D: int, *, quantized: bool, single_pass: bool, block: int, policy: Optional[Policy] = None) -> bool:
    """Whether a problem takes decode_mma.metal (`block`: keys of a split block)."""
    p = policy or current_policy()
    if dtype not in (mx.float16, mx.bfloat16):
        return False
    if quantized:
        return D <= p.quantized_mma_max_d
    return (D <= p.plain_mma_max_d and D % PLAIN_MMA_D_MULTIPLE == 0
            and (single_pass or block >= p.plain_mma_min_block))


def plain_matrix(dtype, D: int, *, quantized: bool, policy: Optional[Policy] = None) -> bool:
    """Whether plain K/V take the matrix kernel's long blocks once split (block_keys)."""
    p = policy or current_policy()
    return not quantized and uses_mma(dtype, D, quantized=False, single_pass=False, block=p.max_block, policy=p)


# Marks key_schedule's key for every S of one block: a one-block Schedule is the same for each S
# (its dims hold single_pass_max_s, a bound of at least S; the kernels take S from K/V's shape).
ONE_BLOCK = "one block"


def key_schedule(S: int, *, plain_matrix: bool, policy: Optional[Policy] = None) -> tuple:
    """All the launches take of S: (ONE_BLOCK, single_pass_max_s) while one block holds all S
    keys, else (keys of a block, blocks)."""
    p = policy or current_policy()
    if S <= p.single_pass_max_s:
        return ONE_BLOCK, p.single_pass_max_s
    return split_blocks(S, plain_matrix=plain_matrix, policy=p)


def score_mantissa(dtype, bits: int, group_size: int) -> int:
    """decode_mma.metal's SCORE_MANTISSA: the query type's mantissa bits where scores take 16-bit
    operands (a code 1 + c / 2^bits exact in that type, and a lane's GS / 4 codes of a group whole
    32-bit words), else 0 (32-bit operands: tf32 on NVIDIA; docs/decisions/schedule-scores16.md).
    Example: bf16, 4 bits, group 64 -> 7; bf16 with 8 bits, or 2 bits in groups of 32 -> 0."""
    mantissa = 10 if dtype == mx.float16 else 7
    return mantissa if bits <= mantissa and group_size * bits >= 128 else 0


def out_mantissa(bits: int) -> int:
    """decode_mma.metal's OUT_MANTISSA: bf16's 7 where V codes take 16-bit operands (1 + c / 2^bits
    exact in bf16; docs/decisions/schedule-out16.md), else 0 (32-bit operands). Example: 4 bits
    -> 7, 8 bits -> 0."""
    return 7 if bits <= 7 else 0


def plain_weight_scale_log2(dtype) -> int:
    """decode_mma.metal's WEIGHT_SCALE_LOG2 over plain K/V: output weights (at most 1) enter the
    products as two parts in the K/V type; in f16 (smallest step 2^-24) scaled by 2^14 so that
    small weights keep their bits; bf16 has float's range."""
    return 14 if dtype == mx.float16 else 0


def quantized_stages(D: int, bits: int, group_size: int, scales_dtype, *, single_pass: bool, short: bool,
                     on_metal: bool, policy: Optional[Policy] = None) -> int:
    """decode_mma.metal's STAGES for a quantized launch (Policy.quantized_stages)."""
    p = policy or current_policy()
    scale_bytes = D // group_size * scales_dtype.size
    if single_pass or (on_metal and not p.stage_on_metal) or (D * bits // 32) % 4 or scale_bytes not in (4, 8, 16):
        return 0
    return p.quantized_short_block_stages if short else p.quantized_stages


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def schedule_for(shape, dtype, *, quantized: bool, mask_kind: str, mask_dtype, bits, scales_dtype, has_ranges: bool,
                 group_size, layered: bool, on_metal: bool, policy: Optional[Policy] = None) -> Schedule:
    """The Schedule of a problem of `shape` (NL, B, H_q, H_kv, L, S, D), made once for every S
    that shares its key_schedule (as a decode loop's growing cache does step after step)."""
    p = policy or current_policy()
    NL, B, H_q, H_kv, L, S, D = shape
    keys = key_schedule(S, plain_matrix=plain_matrix(dtype, D, quantized=quantized, policy=p), policy=p)
    return _schedule_of_keys((NL, B, H_q, H_kv, L, D), dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype,
                             has_ranges, group_size, keys, layered, on_metal, p)


@functools.lru_cache(maxsize=1024)  # keyed by the policy too: a Schedule made under another is never returned
def _schedule_of_keys(heads, dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype, has_ranges, group_size,
                      keys, layered, on_metal, p: Policy) -> Schedule:
    NL, B, H_q, H_kv, L, D = heads
    out_shape = (NL, B, H_q, L, D) if layered else (B, H_q, L, D)
    N = NL * B
    G = H_q // H_kv
    single_pass = keys[0] == ONE_BLOCK
    # One block's dims carry the bound single_pass_max_s, not S: one Schedule (and one dims
    # array) for every S a decode loop's one-block steps take.
    block, NB = (keys[1], 1) if single_pass else keys
    mma = uses_mma(dtype, D, quantized=quantized, single_pass=single_pass, block=block, policy=p)
    if single_pass:
        simdgroups = p.single_pass_simdgroups
    elif mma:
        simdgroups = p.quantized_mma_simdgroups if quantized else p.plain_mma_simdgroups
    else:
        simdgroups = p.simdgroups
    threads = simdgroups * SIMD_WIDTH
    common = [("MASK", MASK_KINDS[mask_kind]), ("MT", mask_dtype), ("LAYERED", layered)]
    if mma:
        body_file = "decode_mma.metal"
        constants = [("T", dtype), ("D", D), ("NSG", simdgroups), *common, ("OFFSETS32", True)]
        tiles = math.ceil(G * L / MMA_ROWS)
        if quantized:
            name = "fa_quantized_decode_mma"
            bounded = (not single_pass and bits <= p.quantized_mma_bounded_max_bits
                       and D // group_size <= p.quantized_mma_bounded_max_groups)
            short = not single_pass and block <= p.quantized_short_block
            per_sm = p.quantized_short_block_threadgroups_per_sm if short else p.quantized_mma_threadgroups_per_sm
            per_sm = per_sm if bounded else 0
            stages = quantized_stages(D, bits, group_size, scales_dtype, single_pass=single_pass, short=short,
                                      on_metal=on_metal, policy=p)
            prefetch = p.quantized_short_block_prefetch_tiles if short and not stages else 0
            constants += [("GS", group_size), ("BITS", bits), ("ST", scales_dtype),
                          ("SCORE_MANTISSA", score_mantissa(dtype, bits, group_size)),
                          ("OUT_MANTISSA", out_mantissa(bits)), ("OT", mx.bfloat16),
                          ("PREFETCH_TILES", prefetch), ("STAGES", stages)]
        else:
            name, per_sm = "fa_decode_mma", p.plain_mma_threadgroups_per_sm
            small_grid = not single_pass and NB * H_kv * tiles * N <= p.plain_prefetch_max_threadgroups
            constants += [("WEIGHT_SCALE_LOG2", plain_weight_scale_log2(dtype)),
                          ("PREFETCH_TILES", p.plain_prefetch_tiles if small_grid else 0)]
    else:
        name = "fa_quantized_decode_attention" if quantized else "fa_decode_attention"
        body_file = "decode_attention.metal"
        per_sm = 0 if quantized or single_pass else p.split_threadgroups_per_sm
        rows = min(_pow2_at_least(G * L), p.max_rows)
        # E: at least D / 32 (a key's lanes fit in a simdgroup); fewer elements when many rows
        # share the registers, fewer rows when D forces many elements.
        min_elements = _pow2_at_least(math.ceil(D / SIMD_WIDTH))
        elements = max(min_elements, min(p.elements_per_lane, p.max_row_elements // rows))
        rows = max(1, min(rows, p.max_row_elements // elements))
        tiles = math.ceil(G * L / rows)
        if quantized:
            keys_in_flight = p.quantized_keys_in_flight
        else:
            key_bytes = p.single_pass_key_bytes_in_flight if single_pass else p.key_bytes_in_flight
            keys_in_flight = max(1, min(p.max_keys_in_flight, key_bytes // (elements * dtype.size)))
        constants = [("T", dtype), ("D", D), ("E", elements), ("ROWS", rows), ("U", keys_in_flight),
                     ("NSG", simdgroups), *common]
        if quantized:
            constants += [("BITS", bits), ("ST", scales_dtype)]
    if single_pass:
        name += "_single_pass"
        output_shapes, output_dtypes, merge = (out_shape,), (dtype,), None
    else:
        output_shapes, output_dtypes = ((N, H_q, L, NB, D), (N, H_q, L, NB, 2)), (mx.float32, mx.float32)
        merge_threads = math.ceil(D / SIMD_WIDTH) * SIMD_WIDTH  # whole simdgroups: it shuffles
        merge = MergeSchedule(constants=(("T", dtype), ("D", D)), grid=(N * H_q * L * merge_threads, 1, 1),
                              threadgroup=(merge_threads, 1, 1), output_shapes=(out_shape,), output_dtypes=(dtype,))
    if per_sm:
        name += f"_{per_sm}_per_sm"
    return Schedule(
        name=name,
        body_file=body_file,
        single_pass=single_pass,
        input_names=(QUANTIZED_INPUTS if quantized else PLAIN_INPUTS) + COMMON_INPUTS,
        output_names=("out",) if single_pass else ("out_partial", "stats_partial"),
        defines=(("FA_QUANTIZED", int(quantized)), ("FA_SINGLE_PASS", int(single_pass))),
        constants=tuple(constants),
        launch_bounds=(threads, per_sm) if per_sm else None,
        dims=(L, G, block, int(has_ranges), group_size or 0),
        grid=(NB * threads, H_kv * tiles, N),
        threadgroup=(threads, 1, 1),
        output_shapes=output_shapes,
        output_dtypes=output_dtypes,
        merge=merge,
    )
