"""Schedule constants of fusedattend.gpu set for a block, for tests that try other schedules."""

import contextlib

from fusedattend import gpu


@contextlib.contextmanager
def gpu_constants(**values):
    """Schedule constants of fusedattend.gpu set for the block (the cached schedule with them)."""
    saved = {name: getattr(gpu, name) for name in values}
    for name, value in values.items():
        setattr(gpu, name, value)
    gpu.clear_caches()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gpu, name, value)
        gpu.clear_caches()
