"""The pytest plugin (entry point `pytest11: fusedattend_conformance`): runs the conformance
properties against any decode-attention kernel.

    python -m pytest --pyargs fusedattend.conformance --fa-kernel mlx.core:fast.scaled_dot_product_attention
    python -m pytest --pyargs fusedattend.conformance --fa-kernel mypkg.attn:decode \\
        --fa-convention fusedattend --fa-supports masks=none,causal --fa-profile quick --fa-report out/mine.json

Without --fa-kernel it only adds its options: every pytest run of an environment holding
fusedattend loads it, so it must change nothing there. With it, a problem with the kernel
(a missing module or attribute, something not callable, an unknown convention or supports key,
a kernel that crashes or returns the wrong shape or dtype on the smallest case) is a usage
error of one line each; a call that does not return within --fa-timeout ends the run with one
line (watchdog.py); a failing property is a line of what broke and a reproducer, not a
traceback.
"""

from __future__ import annotations

import builtins
import json

import pytest

_RESULT = "fa_result"


def pytest_addoption(parser):
    group = parser.getgroup("fusedattend conformance", "fusedattend.conformance (python -m pytest --pyargs fusedattend.conformance)")
    group.addoption("--fa-kernel", default=None, metavar="MODULE:ATTR",
                    help="the attention function to check, e.g. mlx.core:fast.scaled_dot_product_attention")
    group.addoption("--fa-convention", default="sdpa",
                    help="how it is called: sdpa (default), fusedattend, quantized, mlx_lm")
    group.addoption("--fa-supports", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                    help="what it supports (repeatable): masks=, dtypes=, head_dims=, max_L=, max_S=, max_B=, "
                    "gqa=, layers=, key_ranges=, bits=, group_sizes=, precision=float32|dtype; "
                    "properties needing more are n/a")
    group.addoption("--fa-profile", default="default", choices=("quick", "default", "nightly"),
                    help="how many examples a property draws (quick: about a minute on 2 cores)")
    group.addoption("--fa-timeout", type=float, default=120.0, metavar="SECONDS",
                    help="a kernel call taking longer ends the run as hung, with one line and exit status 3 "
                    "(default 120; 0: no bound)")
    group.addoption("--fa-report", default=None, metavar="PATH.json",
                    help="write the report as JSON there, and its markdown twin beside it (PATH.md)")


def _load_kernel(config):
    """The Kernel, after a smoke call on the smallest supported case; UsageError lines otherwise."""
    from . import kernels

    spec, convention = config.getoption("--fa-kernel"), config.getoption("--fa-convention")
    problems = []
    if convention not in kernels.CONVENTIONS:
        problems.append(f"--fa-convention {convention}: unknown convention (one of {', '.join(kernels.CONVENTIONS)})")
        convention = "sdpa"
    for item in config.getoption("--fa-supports"):
        try:
            kernels.parse_supports([item], kernels.Supports())
        except kernels.KernelError as e:
            problems.append(str(e))
    kernel = None
    try:
        kernel = kernels.load(spec, convention, config.getoption("--fa-supports"))
        kernel.timeout = config.getoption("--fa-timeout")
    except kernels.KernelError as e:
        if str(e) not in problems:
            problems.append(str(e))
    if kernel is not None and not problems:
        why = _smoke(kernel)
        if why:
            problems.append(f"--fa-kernel {spec}: {why}")
    if problems:
        raise pytest.UsageError("\n".join(problems))
    return kernel


def _smoke(kernel):
    """Why the kernel fails on the smallest case it supports, or None."""
    from . import cases, kernels

    sup = kernel.supports
    dts = cases.dtypes_of(sup)
    if not dts or not sup.masks:
        return "its declared supports leave no dtype or mask kind"
    if kernel.plain:
        D, gs, bits = min(sup.head_dims), 0, 0
    else:
        triples = cases.quantizable(sup)
        if not triples:
            return "its declared head_dims, group_sizes and bits leave no quantized layout"
        D, gs, bits = triples[0]
    spec = cases.Spec(B=1, H_q=1, H_kv=1, L=1, S=min(4, sup.max_S), D=D, dtype=dts[0],
                      mask="none" if "none" in sup.masks else sup.masks[0], bits=bits, group_size=gs)
    try:
        kernel.call(cases.build(spec))
    except kernels.Refused as e:
        return f"refused the smallest case it declares it supports, {spec!r} ({e})"
    except kernels.KernelFailure as e:
        return f"on {spec!r}: {e}"
    return None


def pytest_configure(config):
    if not config.getoption("--fa-kernel", None):
        return
    from . import cases, session

    from . import watchdog

    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # else the hang line would go to pytest's capture file, lost on exit
        watchdog.release_output = lambda: capture.suspend_global_capture(in_=False)
    session.kernel = _load_kernel(config)
    session.profile = cases.PROFILES[config.getoption("--fa-profile")]
    config.pluginmanager.register(Reporter(config, session.kernel), "fusedattend-conformance-reporter")


def _short(exc, kernel, name):
    """(one-line message, finding, example text) of a failing property's exception."""
    from .properties import Failure
    from .report import reproducer

    group = getattr(builtins, "BaseExceptionGroup", ())
    if group and isinstance(exc, group) and exc.exceptions:  # several distinct failures
        exc = exc.exceptions[0]
    if isinstance(exc, Failure):
        example = None
        if exc.spec is not None:
            example = f"# {exc.spec!r}\n" + reproducer(kernel, name, exc.spec)
        return exc.message, exc.finding, example
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}", None, None


class Reporter:
    """Collects each property test's result (from its report's user_properties, so xdist
    workers' results arrive too), prints the table and writes the report."""

    def __init__(self, config, kernel):
        self.config, self.kernel, self.results = config, kernel, {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        name = getattr(getattr(item, "function", None), "fa_property", None)
        if name is None or not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
            return
        from .properties import PROPERTIES

        rec = getattr(item, "fa_record", None)
        result = {"status": "pass", "worst": rec.worst if rec else None, "example": None,
                  "kind": PROPERTIES[name].kind, "finding": None, "note": None}
        if rep.skipped:
            result["status"] = "n/a"
            reason = getattr(call.excinfo.value, "msg", "") if call.excinfo else ""
            result["note"] = reason.removeprefix("n/a: ")
        elif rep.failed:
            message, finding, example = _short(call.excinfo.value, self.kernel, name)
            result.update(status="fail", finding=finding, example=example,
                          note=None if finding else message)
            lines = [f"{name}: {message}"]
            if example:
                lines += ["  reproduce with:"] + ["    " + line for line in example.splitlines()]
            rep.longrepr = "\n".join(lines)
        elif rec is not None and rec.refused:
            result["note"] = f"refused {rec.refused} inputs ({rec.first_refusal})"
        rep.user_properties.append((_RESULT, json.dumps({"name": name, **result})))

    def pytest_runtest_logreport(self, report):
        from .report import merge

        for key, value in report.user_properties:
            if key == _RESULT:
                result = json.loads(value)
                merge(self.results, result.pop("name"), result)

    def _profile(self):
        return self.config.getoption("--fa-profile")

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):
            return
        if not self.results:
            terminalreporter.write_line("fusedattend conformance: --fa-kernel given but no property ran "
                                        "(collect them with --pyargs fusedattend.conformance)")
            return
        from .report import table

        terminalreporter.section("fusedattend conformance")
        for line in table(self.kernel, self._profile(), self.results):
            terminalreporter.write_line(line)
        path = self.config.getoption("--fa-report")
        if path:
            from .report import document, write

            json_path, md_path = write(path, document(self.kernel, self._profile(), self.results))
            terminalreporter.write_line(f"report: {json_path} and {md_path}")
