"""The GPU backends' launches: kernel objects, inputs, and the repeated-call fast path.

The repeated-call fast path, from the public call down (what is cached where, keyed by what):

1. backends._REPLAYS (fusedattend/backends.py): call signature (_problem.call_signature: shapes
   but S, dtypes, mask kind, scale, ...) + backend argument (+ for backend=None what picks the
   default backend) + FUSEDATTEND_SCHEDULE's value (which fixes the Policy) -> a replayer. A hit
   skips the checks, the dispatch and the set-up: the replayer gets the call's arrays alone.
2. The replayer (`replayer` below), one per signature: key_schedule(S) -> a launcher. A decode
   loop's cache grows a key a step; every S up to single_pass_max_s shares one key, and split S
   change key once per block of keys. The last S's launcher is kept at hand (one comparison a
   step), at most LAUNCHERS_KEPT keys.
3. A launcher (`launcher` below): the problem's Schedule, its kernel objects and the function
   that orders the caller's arrays into the kernels' inputs, all fixed; it only calls the kernels.
4. schedule._schedule_of_keys (lru_cache): (heads, formats, key_schedule, layered, platform,
   Policy) -> Schedule. Keyed by the Policy value: another policy never gets this one's Schedule.
5. _kernel (lru_cache): (name, inputs, outputs, body file, defines, launch bounds, constants) ->
   the mx.fast.{metal,cuda}_kernel object, named by a digest of its text (sources.kernel_text).
6. _int32s / _float32s / _placeholder (lru_cache): the small constant inputs (dims, scale, an
   absent mask or key_ranges), made once per value, padded to CONSTANT_INPUT_MIN_BYTES.
"""

from __future__ import annotations

import functools
from typing import Optional

import mlx.core as mx

from .._problem import Problem
from . import schedule, sources

# MLX's CUDA allocator keeps arrays of at most 8 bytes in a small pool of managed memory advised
# read-mostly, and a kernel's warps waited for a read of one there (2-10 µs a call at B = 1 and 8:
# docs/decisions/schedule-host-inputs.md). So the constant inputs the kernels read are made at
# least this long; the padding is never read.
CONSTANT_INPUT_MIN_BYTES = 16
# A replayer keeps the launchers of this many key_schedule keys at most.
LAUNCHERS_KEPT = 64


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


@functools.lru_cache(maxsize=None)
def _placeholder(dtype):
    """An unread stand-in for an absent mask or key_ranges input (kernels take a fixed list)."""
    return mx.zeros((1, 1, 1, 1, 1) if dtype == mx.bool_ else (1, 2), dtype=dtype)


@functools.lru_cache(maxsize=None)
def _kernel(name, input_names, output_names, body_file, defines=(), launch_bounds=None, constants=()):
    full_name, source, header = sources.kernel_text(name, body_file, defines, launch_bounds, constants)
    make = mx.fast.metal_kernel if sources.on_metal() else mx.fast.cuda_kernel
    return make(
        name=full_name,
        input_names=list(input_names),
        output_names=list(output_names),
        source=source,
        header=header,
        ensure_row_contiguous=False,  # K/V are read in place through their strides
    )


def kernel_args(launch) -> dict:
    """A kernel call's grid, threadgroup and outputs, from a Schedule or its MergeSchedule."""
    return dict(grid=launch.grid, threadgroup=launch.threadgroup, output_shapes=list(launch.output_shapes),
                output_dtypes=list(launch.output_dtypes))


def merge_args(sched: schedule.Schedule) -> Optional[dict]:
    """The merge kernel call's arguments; None for a one-block schedule."""
    return None if sched.merge is None else kernel_args(sched.merge)


def _launch_common(problem: Problem, *, quantized: bool, policy: schedule.Policy):
    """The problem's Schedule, and the function that makes the decode kernel's inputs from the
    caller's arrays (`Problem.arrays`, or a repeated call's of the same shapes and dtypes), in
    Schedule.input_names' order: q, K and V as the caller passed them (any strides), no copy."""
    kind = problem.mask.kind
    NL, B, H_q, H_kv, L, S, D = problem.shape
    if kind in ("bool", "additive"):
        mask = mx.broadcast_to(problem.mask.array, (NL, B, H_q, L, S))  # stride-0 view, no copy
    else:
        mask = _placeholder(mx.bool_)
    q, k, ranges = problem.q, problem.k, problem.key_ranges
    scales_dtype = k.scales.dtype if quantized else None
    sched = schedule.schedule_for(problem.shape, q.dtype, quantized=quantized, mask_kind=kind, mask_dtype=mask.dtype,
                                  bits=problem.bits, scales_dtype=scales_dtype, has_ranges=ranges is not None,
                                  group_size=problem.group_size, layered=problem.layered,
                                  on_metal=sources.on_metal(), policy=policy)
    # 1.0 is read at run time by the kernels' code reading (fa_code_unit in decode_attention.h).
    constants = (_int32s(*sched.dims), _float32s(problem.scale, 1.0))
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

    return sched, inputs_of


def decode_launch(problem: Problem, *, quantized: bool, policy: Optional[schedule.Policy] = None) -> dict:
    """The decode kernel's launch in full (for tools and tests): the Schedule's fields, `dims` as
    the input array, and the kernel call's arguments (inputs, grid, threadgroup, outputs) as `call`."""
    sched, inputs_of = _launch_common(problem, quantized=quantized, policy=policy or schedule.current_policy())
    described = {field: getattr(sched, field) for field in ("name", "body_file", "single_pass", "input_names",
                                                            "output_names", "defines", "constants", "launch_bounds")}
    described["dims"] = _int32s(*sched.dims)
    described["merge_constants"] = sched.merge.constants if sched.merge else None
    described["merge_args"] = merge_args(sched)
    described["call"] = dict(inputs=inputs_of(problem.arrays), **kernel_args(sched))
    return described


def _decode_kernel(sched: schedule.Schedule):
    return _kernel(sched.name, sched.input_names, sched.output_names, sched.body_file, sched.defines,
                   sched.launch_bounds, sched.constants)


def _merge_kernel(sched: schedule.Schedule, window: bool = False):
    """merge_partials.metal over one launch's blocks, or (window) over two launches' blocks in
    order, the second's inputs out_window and stats_window (FA_MERGE_WINDOW)."""
    if window:
        return _kernel("fa_merge_window", ("out_partial", "stats_partial", "out_window", "stats_window"), ("out",),
                       "merge_partials.metal", defines=(("FA_MERGE_WINDOW", 1),), constants=sched.merge.constants)
    return _kernel("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal",
                   constants=sched.merge.constants)


def split_launcher(problem: Problem, *, quantized: bool, policy: schedule.Policy):
    """A split schedule's two launches apart: (the function of the caller's arrays that returns
    the blocks' (out_partial, stats_partial), the function of those that merges them:
    merged(out_partial, stats_partial), or merged(out_partial, stats_partial, out_window,
    stats_window) for the blocks of another launch of the same rows after them, in one merge
    launch). For a caller that merges the blocks of several launches (window_gpu), whose policy
    must split: ValueError if it gives this problem one pass."""
    sched, inputs_of = _launch_common(problem, quantized=quantized, policy=policy)
    if sched.single_pass:
        raise ValueError("split_launcher: the policy gives this problem a single pass, with no blocks to merge")
    decode, decode_args = _decode_kernel(sched), kernel_args(sched)
    merge, merge_window, merging = _merge_kernel(sched), _merge_kernel(sched, window=True), merge_args(sched)

    def partials(*arrays):
        return decode(inputs=inputs_of(arrays), **decode_args)

    def merged(out_partial, stats_partial, *window):
        return (merge_window if window else merge)(inputs=[out_partial, stats_partial, *window], **merging)[0]

    return partials, merged


def launcher(problem: Problem, *, quantized: bool, policy: Optional[schedule.Policy] = None):
    """The function of the caller's arrays (`Problem.arrays`) that launches the problem's kernels,
    everything else fixed. It takes any arrays of the problem's shapes and dtypes. Returns the
    output in the caller's form: (B, H_q, L, D), or (NL, B, H_q, L, D) for a layered call. None
    where the grid would pass CUDA's limit."""
    if problem.shape[0] * problem.shape[1] > schedule.MAX_GRID_Z:
        return None
    sched, inputs_of = _launch_common(problem, quantized=quantized, policy=policy or schedule.current_policy())
    decode, decode_args = _decode_kernel(sched), kernel_args(sched)
    if sched.single_pass:
        def launch_single(*arrays):
            return decode(inputs=inputs_of(arrays), **decode_args)[0]

        return launch_single
    merge, merging = _merge_kernel(sched), merge_args(sched)

    def launch_split(*arrays):  # split_launcher's two functions in one call: the hot path of a replay
        return merge(inputs=decode(inputs=inputs_of(arrays), **decode_args), **merging)[0]

    return launch_split


def replayer(problem: Problem, *, quantized: bool):
    """launcher's function for calls that repeat this one's signature (backends.replay): any
    arrays of the problem's shapes and dtypes but for the keys' length S (axis -2 of K/V), which
    a decode loop's cache grows by one every step. Another S takes the launcher of its
    key_schedule, made once, under the policy in force when the replayer was made. None where
    launcher is None."""
    policy = schedule.current_policy()
    first = launcher(problem, quantized=quantized, policy=policy)
    if first is None:
        return None
    S, D = problem.shape[5], problem.shape[6]
    plain_matrix = schedule.plain_matrix(problem.q.dtype, D, quantized=quantized, policy=policy)
    template = problem._replace(q=None, k=None, v=None, key_ranges=None)  # keeps no array of the caller's

    launchers = {schedule.key_schedule(S, plain_matrix=plain_matrix, policy=policy): first}
    last = [S, first]  # the last call's S and launcher

    def replay(*arrays):
        S = arrays[1].shape[-2]
        if S != last[0]:
            key = schedule.key_schedule(S, plain_matrix=plain_matrix, policy=policy)
            launch = launchers.get(key)
            if launch is None:
                if len(launchers) >= LAUNCHERS_KEPT:
                    launchers.clear()
                launch = launchers[key] = launcher(template.with_arrays(arrays), quantized=quantized, policy=policy)
            last[:] = S, launch
        return last[1](*arrays)

    return replay
