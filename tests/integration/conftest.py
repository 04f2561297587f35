"""Fixtures of the mlx_lm integration tests."""

import pytest

import fusedattend


@pytest.fixture
def patched(backend):
    """mlx_lm's attention patched to fusedattend's `backend` for the test, restored after."""
    restore = fusedattend.patch_mlx_lm(backend=backend)
    yield
    restore()
