"""A short, stable name for the machine a benchmark ran on: where per-chip baselines are filed.

    apple-m4-pro-20c    Apple silicon: the brand string (sysctl machdep.cpu.brand_string, else MLX's
                        Metal device name) and the GPU's core count (IOKit's gpu-core-count), which
                        tells apart the binnings of one chip
    nvidia-h200         MLX's CUDA device name
    cpu-amd-epyc-2c     anything else: the CPU model from /proc/cpuinfo (or platform) and cores
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    text = re.sub(r"\b(cpu|processor|\d+-core)\b", " ", text)
    text = re.sub(r"@.*$", "", text)  # drop "@ 2.40GHz"
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def _gpu_name():
    try:
        import mlx.core as mx

        if mx.default_device() != mx.gpu:
            return None
        return mx.device_info().get("device_name") or None
    except Exception:  # no GPU backend, or an MLX without device_info
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _command_output(args) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _apple_brand():
    """The chip's brand string on macOS ("Apple M4 Pro"), or None."""
    return _command_output(["sysctl", "-n", "machdep.cpu.brand_string"]).strip() or None


def _apple_gpu_cores():
    """The GPU's core count on macOS: IOKit's AGXAccelerator "gpu-core-count", else
    system_profiler's "Total Number of Cores"; None where neither says (a virtual machine)."""
    for args, pattern in ((["ioreg", "-rc", "AGXAccelerator", "-d", "1"], r'"gpu-core-count"\s*=\s*(\d+)'),
                          (["system_profiler", "SPDisplaysDataType"], r"Total Number of Cores:\s*(\d+)")):
        found = re.search(pattern, _command_output(args))
        if found:
            return int(found.group(1))
    return None


def chip_id() -> str:
    gpu = _gpu_name()
    if gpu and sys.platform == "darwin":
        cores = _apple_gpu_cores()
        return _slug(_apple_brand() or gpu) + (f"-{cores}c" if cores else "")
    if gpu:
        return _slug(gpu)
    return f"cpu-{_slug(_cpu_model())}-{os.cpu_count() or 1}c"


if __name__ == "__main__":
    print(chip_id())
