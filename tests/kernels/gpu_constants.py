"""Schedule constants of fusedattend.gpu set for a block, for tests that try other schedules."""

import contextlib

from fusedattend import gpu


@contextlib.contextmanager
def gpu_constants(**values):
    """Schedule constants of fusedattend.gpu set for the block (the cached schedule with them)."""
    saved = gpu.set_constants(values)
    try:
        yield
    finally:
        gpu.set_constants(saved)
