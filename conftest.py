"""Test-wide options: which backends to run against, the quick tier, and the Hypothesis profiles.

    pytest tests/property                      # every backend available here, `dev` profile
    pytest tests/property --backend cuda       # one backend (repeat the flag for more)
    pytest --quick                             # the quick tier: no slow tests nor tests/kernels, `quick` profile
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
# A few drawn examples a property, for the quick tier (pytest --quick).
settings.register_profile("quick", max_examples=5, deadline=None, derandomize=True, database=None,
                          suppress_health_check=_SLOW_OK)
# Only the pinned edge cases (@example): for runs where every call is slow, as under
# compute-sanitizer.
settings.register_profile("pinned", phases=[Phase.explicit], deadline=None, suppress_health_check=_SLOW_OK)
# The pinned cases and a few freshly drawn ones (3 x factor): the sanitizers' "random" set, so
# that each sanitizer run also sees layouts, masks and key ranges no fixed set holds.
settings.register_profile("sanitize", max_examples=3, deadline=None, suppress_health_check=_SLOW_OK)
# Loaded explicitly, whatever the environment: with CI set, Hypothesis would otherwise pick its
# own built-in "ci" profile, not ours.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# The quick tier leaves tests/kernels out, besides every test marked slow: the kernels compiled for
# the CPU and run a fiber a GPU thread take minutes on 2 cores, their CUDA form's nvcc builds a
# minute more. Whoever edits metal/ runs the full suite.
QUICK_SKIPS = ("tests/kernels/",)


def pytest_addoption(parser):
    parser.addoption(
        "--backend",
        action="append",
        default=None,
        help="fusedattend backend to test (reference, cpu, metal, cuda); repeatable; "
        "default: every backend available here",
    )
    parser.addoption(
        "--quick",
        action="store_true",
        help="the quick tier: deselect tests marked slow and tests/kernels, and "
        "load the `quick` Hypothesis profile (unless --hypothesis-profile or HYPOTHESIS_PROFILE names one)",
    )


def pytest_configure(config):
    # A bad --backend is the caller's mistake: one line, not pytest's internal-error traceback
    # (a UsageError raised later, in collection, is reported with a stack).
    import fusedattend

    available = fusedattend.available_backends()
    for name in config.getoption("--backend") or []:
        if name not in available:
            if name in fusedattend.BACKENDS:
                why = "not available here"
            else:
                why = f"unknown backend (fusedattend's: {', '.join(fusedattend.BACKENDS)})"
            raise pytest.UsageError(f"--backend {name}: {why} (available: {', '.join(available)})")
    if config.getoption("--quick") and not (config.getoption("hypothesis_profile", None)
                                            or os.environ.get("HYPOTHESIS_PROFILE")):
        settings.load_profile("quick")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--quick"):
        return
    kept, dropped = [], []
    for item in items:
        path = item.nodeid.split("::")[0]
        (dropped if "slow" in item.keywords or path.startswith(QUICK_SKIPS) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def selected_backends(config):
    import fusedattend

    return config.getoption("--backend") or fusedattend.available_backends()  # checked in pytest_configure


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", selected_backends(metafunc.config))


@pytest.fixture
def forbid_key_ranges_read(monkeypatch):
    """A function that, once called, makes any read of key ranges back on the host
    (`key_ranges.key_ranges_outside_on_host`) an AssertionError for the rest of the test."""

    def forbid():
        from fusedattend import key_ranges

        def read(key_ranges, S):
            raise AssertionError("key ranges read back on the host")

        monkeypatch.setattr(key_ranges, "key_ranges_outside_on_host", read)

    return forbid


def pytest_report_header(config):
    import mlx.core as mx

    return f"fusedattend backends under test: {selected_backends(config)}; mlx {mx.__version__}, default device {mx.default_device()}"
