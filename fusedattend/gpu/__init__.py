"""The "metal" and "cuda" backends: the kernels under metal/, compiled for the GPU at hand.

schedule.py decides (pure: Policy -> Schedule), sources.py assembles the kernels' text,
launch.py makes the kernel objects and launches them, with the repeated-call fast path.
No kernel logic lives in this package.
"""

from __future__ import annotations

import mlx.core as mx

from .._problem import Problem
from .launch import decode_launch, launcher, replayer
from .schedule import Policy, current_policy

__all__ = ["Policy", "current_policy", "decode_attention", "decode_launch", "launcher",
           "quantized_decode_attention", "replayer"]


def _attend(problem: Problem, *, quantized: bool) -> mx.array:
    launch = launcher(problem, quantized=quantized)
    if launch is None:  # past CUDA's grid limit
        from .. import reference

        return (reference.quantized_decode_attention if quantized else reference.decode_attention)(problem)
    return launch(*problem.arrays)


def decode_attention(problem: Problem) -> mx.array:
    return _attend(problem, quantized=False)


def quantized_decode_attention(problem: Problem) -> mx.array:
    return _attend(problem, quantized=True)
