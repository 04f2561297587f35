"""ci/key_ranges_check.py times the shipped key_ranges check against its MLX-op form: both must
accept and refuse the same ranges, or the timing compares two different checks."""
import importlib.util
from pathlib import Path

import mlx.core as mx
import pytest

spec = importlib.util.spec_from_file_location(
    "key_ranges_check", Path(__file__).resolve().parents[1] / "ci/key_ranges_check.py")
key_ranges_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(key_ranges_check)

S = 16
RANGES = [(0, S), (0, 0), (S, 0), (3, S - 3), (3, S - 2), (-1, 2), (0, -1), (S + 1, 0),
          (2**62, 2**62), (2**63 - 1, 1)]


@pytest.mark.parametrize("start, length", RANGES)
def test_both_forms_accept_and_refuse_alike(start, length):
    key_ranges = mx.array([[0, S], [start, length]], dtype=mx.int64)
    verdicts = []
    for check in (key_ranges_check._key_ranges, key_ranges_check.check_as_mlx_ops):
        try:
            check(key_ranges, 2, S)
            verdicts.append("accepted")
        except ValueError:
            verdicts.append("refused")
    valid = 0 <= start <= S and 0 <= length <= S - start
    assert verdicts == ["accepted" if valid else "refused"] * 2
