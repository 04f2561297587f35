"""A short, stable name for the machine a benchmark ran on: where per-chip baselines are filed.

    apple-m4-pro        Apple silicon (MLX's Metal device name)
    nvidia-h200         MLX's CUDA device name
    cpu-amd-epyc-2c     anything else: the CPU model from /proc/cpuinfo (or platform) and cores
"""

from __future__ import annotations

import os
import platform
import re


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


def chip_id() -> str:
    gpu = _gpu_name()
    if gpu:
        return _slug(gpu)
    return f"cpu-{_slug(_cpu_model())}-{os.cpu_count() or 1}c"


if __name__ == "__main__":
    print(chip_id())
