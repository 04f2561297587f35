"""A pytest plugin for the nightly perf run (ci/nightly.sh loads it with -p nightly_warmup).

On a GPU, short kernels time stably only after about a second of work has raised the clocks, and
a pause of over a second lets them fall again. So before each test this keeps the GPU busy for
NIGHTLY_WARMUP_S seconds (default 1; 0 turns it off) with matmuls. On a CPU it does nothing.
"""

import os
import time

import pytest


def warm_up(seconds: float, device=None) -> int:
    """Keeps `device` (default: MLX's default device) busy for `seconds` with 1024x1024 float32
    matmuls, each evaluated; returns how many ran."""
    import mlx.core as mx

    device = device or mx.default_device()
    with mx.stream(device):
        a = mx.random.normal((1024, 1024))
        mx.eval(a)
        count, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            a = (a @ a) * (1.0 / 32)
            mx.eval(a)
            count += 1
    return count


def _seconds() -> float:
    return float(os.environ.get("NIGHTLY_WARMUP_S", "1"))


def _on_gpu() -> bool:
    import mlx.core as mx

    return mx.default_device() == mx.gpu


def pytest_report_header(config):
    if _on_gpu() and _seconds() > 0:
        return f"nightly: the GPU is kept busy {_seconds():g} s before each test"
    return "nightly: no GPU warm-up (no GPU, or NIGHTLY_WARMUP_S=0)"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if _on_gpu() and _seconds() > 0:
        warm_up(_seconds())
