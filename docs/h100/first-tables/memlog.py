"""pytest plugin (call 203): after each test, one line of GPU memory to $MEMLOG.

MLX's active and cached memory, torch's reserved memory where torch was imported, and the
device's free memory (cudaMemGetInfo, through torch), in GB. It shows who held the memory that
the perf suite ran out of (call 202)."""

import os
import sys

import mlx.core as mx

GB = 1e9


def pytest_runtest_logreport(report):
    if report.when != "teardown":
        return
    fields = [f"active {mx.get_active_memory() / GB:.1f}", f"mlx-cache {mx.get_cache_memory() / GB:.1f}",
              f"mlx-peak {mx.get_peak_memory() / GB:.1f}"]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        fields += [f"torch-reserved {torch.cuda.memory_reserved() / GB:.1f}", f"free {free / GB:.1f} of {total / GB:.1f}"]
    with open(os.environ["MEMLOG"], "a") as log:
        print(report.nodeid.split("::")[-1], report.outcome, *fields, sep="  ", file=log)
