"""Test-wide options: which backends to run against, and the Hypothesis profiles.

    pytest tests/property                      # every backend available here, `dev` profile
    pytest tests/property --backend cuda       # one backend (repeat the flag for more)
    pytest --hypothesis-profile=ci -n 2        # what CI runs
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile(
    "nightly", max_examples=500, deadline=None, print_blob=True, suppress_health_check=_SLOW_OK
)
# Only the pinned edge cases (@example): for runs where every call is slow, as under
# compute-sanitizer (ci/gpu/h200-session.sh sanitize).
settings.register_profile("pinned", phases=[Phase.explicit], deadline=None, suppress_health_check=_SLOW_OK)
# The pinned cases and a few freshly drawn ones (3 x factor): the sanitizers' "random" set, so
# that each sanitizer run also sees layouts, masks and key ranges no fixed set holds.
settings.register_profile("sanitize", max_examples=3, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser):
    parser.addoption(
        "--backend",
        action="append",
        default=None,
        help="fusedattend backend to test (reference, cpu, metal, cuda); repeatable; "
        "default: every backend available here",
    )


def selected_backends(config):
    import fusedattend

    chosen = config.getoption("--backend") or fusedattend.available_backends()
    for name in chosen:
        if name not in fusedattend.available_backends():
            raise pytest.UsageError(
                f"--backend {name}: not available here (available: {fusedattend.available_backends()})"
            )
    return chosen


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", selected_backends(metafunc.config))


@pytest.fixture
def forbid_key_ranges_read(monkeypatch):
    """A function that, once called, makes any read of key ranges back on the host
    (`_problem.key_ranges_outside_on_host`) an AssertionError for the rest of the test."""

    def forbid():
        from fusedattend import _problem

        def read(key_ranges, S):
            raise AssertionError("key ranges read back on the host")

        monkeypatch.setattr(_problem, "key_ranges_outside_on_host", read)

    return forbid


def pytest_report_header(config):
    import mlx.core as mx

    return f"fusedattend backends under test: {selected_backends(config)}; mlx {mx.__version__}, default device {mx.default_device()}"
