"""How the properties compare outputs: against the oracle within the derived tolerance, and
bit for bit (NaN equal to NaN), said in words for the report."""

from __future__ import annotations

import numpy as np

from . import cases as C
from . import oracle


def target(ratio, label):
    """hypothesis.target(err/tol), inside a Hypothesis test only (a reproducer calls checks outside)."""
    from hypothesis import target as hypothesis_target
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context() and np.isfinite(ratio):
        hypothesis_target(min(float(ratio), 1e6), label=label)


def tolerance(kernel, case, expected, stats, factor=1.0):
    """oracle.parity_tolerance, plus the dtype-rounding bound for a kernel declaring precision=dtype."""
    tol = oracle.parity_tolerance(expected, stats, case.dtype_name, case.spec.D)
    if kernel.supports.precision == "dtype":
        tol = tol + oracle.low_precision_tolerance(expected, stats, case.dtype_name, case.spec.D)
    return factor * tol


def ratio(actual, expected, tol, rows):
    """(max err/tol, max err) over `rows` (boolean over the leading (…, H_q, L) axes)."""
    a, e = np.asarray(actual, np.float64)[rows], np.asarray(expected, np.float64)[rows]
    t = np.broadcast_to(tol, np.shape(expected))[rows]
    if a.size == 0:
        return 0.0, 0.0
    return oracle.compare(a, e, t)


def off_by(err, ratio):
    """How far off, in words: NaN or Inf in the output reads as that, not as "inf x"."""
    if not np.isfinite(ratio):
        return "NaN or Inf where a finite value belongs"
    return f"{err:.3g}, {ratio:.3g}x the tolerance"


def differs(a, b, rows=None):
    """'' when a and b are the same bits (NaN equal to NaN) in `rows` (boolean over the leading
    (…, H_q, L) axes; default all), else what differs, in words."""
    import mlx.core as mx

    if rows is None and mx.array_equal(a, b, equal_nan=True).item():
        return ""
    x, y = C.to_np(a), C.to_np(b)
    if rows is not None:
        x, y = x[rows], y[rows]
    with np.errstate(invalid="ignore"):
        diff = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        gaps = np.abs(x - y)[diff]
    finite = gaps[np.isfinite(gaps)]
    big = finite.max() if finite.size else (float("inf") if np.isinf(gaps).any() else float("nan"))
    if not diff.any():
        return ""
    return f"{int(diff.sum())} of {diff.size} elements differ (max |diff| {big:.3g})"
