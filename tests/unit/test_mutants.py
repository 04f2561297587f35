"""The mutation harness (tests/mutants.py) is sound: with no knob turned, its implementation
matches the oracle, or a mutant's failures would mean nothing. Its key ranges once fell behind
the package's padding form (a negative second word), and only a manual run showed it."""

import pytest

from fusedattend import KeyRanges
from tests import mutants
from tests.property.strategies import edge_case, pinned_cases, pinned_layered_cases, pinned_quantized_cases
from tests.property.test_online_softmax_parity import check_parity

PADDED = edge_case(S=300, mask="causal", key_ranges=KeyRanges.from_padding(left=[0, 40], right=[10, 0]))
CASES = pinned_cases() + pinned_layered_cases() + pinned_quantized_cases() + [PADDED]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"S{c.dims[5]}-{c.mask_kind}-bits{c.bits}")
def test_unmutated_harness_matches_oracle(case, monkeypatch):
    mutants.install("none", monkeypatch.setattr)
    check_parity(case, "reference")


def test_a_mutant_fails_the_same_check(monkeypatch):
    mutants.install("causal_off_by_one", monkeypatch.setattr)
    with pytest.raises(AssertionError):
        check_parity(PADDED, "reference")
