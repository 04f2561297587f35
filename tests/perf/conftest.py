"""Perf-suite plumbing: opt-in gating, machine info for pytest-benchmark, same-session peer timings.

Benchmarks marked `perf` are skipped unless selected with `-m perf` (or FUSEDATTEND_PERF=1);
the `smoke` test always runs. See docs/testing.md ("The perf regression") for the record/compare commands.
"""

import hashlib
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNEL_DIR = REPO / "metal"


def _perf_selected(config) -> bool:
    return "perf" in (config.getoption("markexpr", "") or "") or os.environ.get("FUSEDATTEND_PERF") == "1"


def pytest_collection_modifyitems(config, items):
    if _perf_selected(config):
        return
    skip = pytest.mark.skip(reason="perf benchmark: run with -m perf -p no:xdist (docs/testing.md)")
    for item in items:
        if "perf" in item.keywords and "smoke" not in item.keywords:
            item.add_marker(skip)


def kernel_sources_hash() -> str:
    """sha256 over the kernel sources (metal/*), so a baseline says which kernels it timed."""
    h = hashlib.sha256()
    if KERNEL_DIR.is_dir():
        for path in sorted(p for p in KERNEL_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def pytest_benchmark_update_machine_info(config, machine_info):
    import mlx.core as mx

    import fusedattend
    from fusedattend.chip import chip_id

    try:
        import mlx_lm

        mlx_lm_version = mlx_lm.__version__
    except ImportError:
        mlx_lm_version = None
    machine_info["fusedattend"] = {
        "chip": chip_id(),
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm_version,
        "device": str(mx.default_device()),
        "backends": fusedattend.available_backends(),
        "default_backend": fusedattend.default_backend(),
        "kernel_sources_sha256": kernel_sources_hash(),
    }


@pytest.fixture(scope="session")
def peer_times():
    """(case key, peer name) -> bench.time_call's samples (seconds per call), measured once a session."""
    return {}
