"""windowed_decode_attention on the GPU backends: two split launches (the quantized keys, the
window) whose per-block softmax states one merge launch combines, quantized blocks first.

Nothing is dequantized in device memory: the quantized launch is quantized_decode_attention's
kernel, the window's decode_attention's, each writing its blocks' (max, denominator,
unnormalised output) as their split launches do; merge_partials.metal (FA_MERGE_WINDOW) takes
the blocks of both as one row, the quantized ones first, with no copy joining them. Each part is
clipped to a request's range by its own key ranges.

Batch invariance: blocks are Policy.window_block keys whatever S, so a request's blocks, and their
sums, do not depend on the capacity of the buffers around it (the longest request's); blocks
past its range write no-key states, which the merge weighs 0.

"causal" (L > 1) is split exactly when every request's window holds at least L - 1 keys: then
every row sees all its quantized keys, and the window launch's causal alignment (to its range's
end) is the sequence's. Otherwise, and past CUDA's grid, None: the caller takes the gathered path.
"""

from __future__ import annotations

import dataclasses
import functools

from . import backends
from ._problem import Problem


@functools.lru_cache(maxsize=8)
def _policy(base):
    """`base` with every split block of either launch base.window_block keys, never one pass."""
    block = base.window_block
    return dataclasses.replace(base, single_pass_max_s=0, min_block=block, max_block=block,
                               plain_long_blocks_from_s=2**62, plain_longer_blocks_from_s=2**62)


def window_block() -> int:
    """Keys a block of either launch, under the policy in force."""
    from .gpu import schedule

    return schedule.current_policy().window_block


# (format, shapes but S, dtypes, scale, mask kind, key ranges or not, blocks, policy) -> the
# launch's split_launcher pair: a decode loop repeats one key a step, so the set-up runs once (as
# fusedattend.gpu's replays do); the pair holds none of the caller's arrays.
_LAUNCHES = {}
_LAUNCHES_MAX = 256
backends.forget_when_replays_are(_LAUNCHES.clear)


def _split(problem: Problem, quantized: bool, policy):
    from .gpu import launch, schedule

    key = (quantized, problem.q.shape, problem.q.dtype, problem.scale, problem.mask.kind, problem.key_ranges is None,
           problem.bits, problem.group_size, problem.layered,
           schedule.key_schedule(problem.shape[5], plain_matrix=False, policy=policy), policy,
           tuple((a.shape[:-2], a.shape[-1], a.dtype) for a in problem.arrays[1:]))
    known = _LAUNCHES.get(key)
    if known is None:
        if len(_LAUNCHES) >= _LAUNCHES_MAX:
            _LAUNCHES.clear()
        known = _LAUNCHES[key] = launch.split_launcher(problem, quantized=quantized, policy=policy)
    return known


def plan(window: Problem, quantized: Problem, w_lens, causal: bool):
    """The function run(q, quantized keys, quantized values, window keys, window values) that
    launches this call's kernels (for arrays of these shapes and dtypes, a window of any length
    within the same number of blocks, these ranges), or None where this path does not apply
    (module docstring)."""
    from .gpu import schedule
    from ._problem import CAUSAL_MASK, NO_MASK

    B, L = window.q.shape[0], window.q.shape[-2]
    if B > schedule.MAX_GRID_Z or (causal and min(w_lens) < L - 1):
        return None
    policy = _policy(schedule.current_policy())
    window = window._replace(mask=CAUSAL_MASK if causal else NO_MASK)
    window_partials, merged = _split(window, False, policy)
    w_ranges = () if window.key_ranges is None else (window.key_ranges,)
    if quantized is None:
        return lambda q, kq, vq, wk, wv: merged(*window_partials(q, wk, wv, *w_ranges))
    quantized_partials = _split(quantized._replace(mask=NO_MASK), True, policy)[0]
    q_ranges = () if quantized.key_ranges is None else (quantized.key_ranges,)

    def run(q, kq, vq, wk, wv):
        out, stats = window_partials(q, wk, wv, *w_ranges)
        return merged(*quantized_partials(q, *kq, *vq, *q_ranges), out, stats)  # quantized blocks first

    return run
