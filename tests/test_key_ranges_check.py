"""ci/key_ranges_check.py times the shipped key_ranges check against its MLX-op form: both must
accept and refuse the same ranges, or the timing compares two different checks. And the ranges
this package makes itself (`_problem.noted_key_ranges`) are checked as they are made, then not
read back on the host, for their own S only."""
import importlib.util
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import _problem

spec = importlib.util.spec_from_file_location(
    "key_ranges_check", Path(__file__).resolve().parents[1] / "ci/key_ranges_check.py")
key_ranges_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(key_ranges_check)

S = 16
RANGES = [(0, S), (0, 0), (S, 0), (3, S - 3), (3, S - 2), (-1, 2), (0, -1), (S + 1, 0),
          (2**62, 2**62), (2**63 - 1, 1)]


B_BOTH_SIDES = (2, _problem.KEY_RANGES_AS_INTS_MAX_B, _problem.KEY_RANGES_AS_INTS_MAX_B + 1)


@pytest.mark.parametrize("B", B_BOTH_SIDES, ids=lambda B: f"B{B}")
@pytest.mark.parametrize("start, length", RANGES)
def test_both_forms_accept_and_refuse_alike(start, length, B):
    """The shipped check reads Python ints up to KEY_RANGES_AS_INTS_MAX_B requests, numpy beyond:
    B on both sides of that, the range under test in the last row."""
    key_ranges = mx.array([[0, S]] * (B - 1) + [[start, length]], dtype=mx.int64)
    verdicts = []
    for check in (key_ranges_check._key_ranges, key_ranges_check.check_as_mlx_ops):
        try:
            check(key_ranges, B, S)
            verdicts.append("accepted")
        except ValueError:
            verdicts.append("refused")
    valid = 0 <= start <= S and 0 <= length <= S - start
    assert verdicts == ["accepted" if valid else "refused"] * 2


@pytest.mark.parametrize("B", B_BOTH_SIDES, ids=lambda B: f"B{B}")
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int8], ids=lambda d: d.__name__)
def test_other_integer_dtypes(dtype, B):
    """Unsigned values past S, and a narrow dtype's largest value, are refused on both host paths."""
    top = np.iinfo(dtype).max  # uint64: past int64, which numpy's path casts to
    for last, valid in (((0, 8), True), ((top, 0), False), ((0, top), False)):
        key_ranges = mx.array(np.array([[0, 8]] * (B - 1) + [list(last)], dtype=dtype))
        assert _problem.key_ranges_outside_on_host(key_ranges, 8) is (not valid)


def _attend(key_ranges, S):
    q = mx.random.normal((2, 4, 1, 8), key=mx.random.key(1))
    k, v = (mx.random.normal((2, 2, S, 8), key=mx.random.key(2 + i)) for i in (0, 1))
    return fa.decode_attention(q, k, v, key_ranges=key_ranges)


def _fail_on_read(monkeypatch):
    def read(key_ranges, S):
        raise AssertionError("read back on the host")

    monkeypatch.setattr(_problem, "key_ranges_outside_on_host", read)


def test_noted_ranges_not_read_back(monkeypatch):
    pairs = [(3, S - 3), (0, S)]
    expected = _attend(mx.array(pairs), S)
    noted = _problem.noted_key_ranges(pairs, S)
    _fail_on_read(monkeypatch)
    assert mx.array_equal(_attend(noted, S), expected)
    with pytest.raises(AssertionError, match="read back"):  # a caller's equal array is read
        _attend(mx.array(pairs), S)


def test_noted_ranges_checked_for_another_S():
    """Noted for S, used with fewer keys: checked again, and (3, S - 3) is then out of range."""
    noted = _problem.noted_key_ranges([(3, S - 3), (0, 1)], S)
    with pytest.raises(ValueError, match="key_ranges"):
        _attend(noted, S - 1)


@pytest.mark.parametrize("start, length", [r for r in RANGES if not (0 <= r[0] <= S and 0 <= r[1] <= S - r[0])])
def test_noted_ranges_refused_as_made(start, length):
    with pytest.raises(ValueError, match="key_ranges"):
        _problem.noted_key_ranges([(0, S), (start, length)], S)


def test_noted_entry_goes_with_its_array():
    before = len(_problem._NOTED_RANGES)
    noted = _problem.noted_key_ranges([(0, S)], S)
    assert len(_problem._NOTED_RANGES) == before + 1
    del noted
    assert len(_problem._NOTED_RANGES) == before
