"""The conformance properties as pytest tests, one a property, for the kernel --fa-kernel names
(collected by `python -m pytest --pyargs fusedattend.conformance --fa-kernel MODULE:ATTR`).

Each test draws Specs inside what the kernel supports (Hypothesis, the --fa-profile's count
times the property's factor) after the pinned cases. An input the kernel refuses with
ValueError/TypeError is skipped as unsupported; a property with no accepted input is n/a.
"""

from __future__ import annotations

import pytest

from fusedattend.conformance import session
from fusedattend.conformance.properties import PROPERTIES


class Record:
    """What one property test saw: the worst ratio, inputs accepted and refused."""

    def __init__(self):
        self.worst, self.accepted, self.refused, self.first_refusal = None, 0, 0, None

    def accept(self, ratio):
        self.accepted += 1
        if ratio is not None:
            self.worst = ratio if self.worst is None else max(self.worst, ratio)


def _settings(profile, factor):
    from hypothesis import HealthCheck, Phase, settings

    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if profile.name != "quick":  # shrinking a failure costs many calls; quick runs report the first
        phases.append(Phase.shrink)
    return settings(max_examples=max(1, int(profile.max_examples * factor)), deadline=None,
                    derandomize=profile.derandomize, database=None, phases=phases, print_blob=False,
                    report_multiple_bugs=False, suppress_health_check=list(HealthCheck))


def _run(prop, kernel, profile, record):
    from hypothesis import example, given

    from fusedattend.conformance.cases import build
    from fusedattend.conformance.kernels import KernelFailure, Refused
    from fusedattend.conformance.properties import Failure

    strategy = prop.strategy(kernel, profile)
    if strategy is None:
        pytest.skip("n/a: no input the kernel supports has what this property needs")

    def body(spec):
        try:
            ratio = prop.check(kernel, build(spec))
        except Refused as e:
            record.refused += 1
            record.first_refusal = record.first_refusal or str(e)
            return
        except KernelFailure as e:
            failure = Failure(str(e))
            failure.spec = spec
            raise failure from None
        except Failure as e:
            e.spec = spec
            if e.ratio is not None:
                record.worst = e.ratio if record.worst is None else max(record.worst, e.ratio)
            e.__traceback__ = None
            raise
        record.accept(ratio)

    for spec in reversed(prop.pinned_specs(kernel) if profile.pinned else []):
        body = example(spec=spec)(body)
    _settings(profile, prop.factor)(given(spec=strategy)(body))()
    if not record.accepted:
        why = f" ({record.first_refusal})" if record.first_refusal else ""
        pytest.skip(f"n/a: the kernel refused every input{why}")


def _make(prop):
    def test(request):
        kernel, profile = session.kernel, session.profile
        if kernel is None:
            pytest.skip("no --fa-kernel given (python -m pytest --pyargs fusedattend.conformance --fa-kernel MODULE:ATTR)")
        reason = prop.not_applicable(kernel)
        if reason:
            pytest.skip(f"n/a: {reason}")
        request.node.fa_record = record = Record()
        _run(prop, kernel, profile, record)

    test.__name__ = test.__qualname__ = f"test_{prop.name}"
    test.__doc__ = prop.doc()
    test.fa_property = prop.name
    return test


for _prop in PROPERTIES.values():
    globals()[f"test_{_prop.name}"] = _make(_prop)
del _prop
