"""Key ranges: the host check of a key_ranges array accepts exactly the valid ranges on both of
its paths (Python ints up to KEY_RANGES_AS_INTS_MAX_B requests, numpy beyond), and a
`fusedattend.KeyRanges` is checked as it is made, against each call's B and S by its length and
end, and not read back on the host."""

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import _problem
from fusedattend import key_ranges as key_ranges_module

S = 16
RANGES = [(0, S), (0, 0), (S, 0), (3, S - 3), (3, S - 2), (-1, 2), (0, -1), (S + 1, 0),
          (2**62, 2**62), (2**63 - 1, 1)]


B_BOTH_SIDES = (2, key_ranges_module.KEY_RANGES_AS_INTS_MAX_B, key_ranges_module.KEY_RANGES_AS_INTS_MAX_B + 1)


@pytest.mark.parametrize("B", B_BOTH_SIDES, ids=lambda B: f"B{B}")
@pytest.mark.parametrize("start, length", RANGES)
def test_the_check_accepts_exactly_the_valid_ranges(start, length, B):
    """The check reads Python ints up to KEY_RANGES_AS_INTS_MAX_B requests, numpy beyond: B on
    both sides of that, the range under test in the last row (ends past int64 included)."""
    key_ranges = mx.array([[0, S]] * (B - 1) + [[start, length]], dtype=mx.int64)
    try:
        _problem._key_ranges(key_ranges, B, S)
        verdict = "accepted"
    except ValueError:
        verdict = "refused"
    valid = 0 <= start <= S and 0 <= length <= S - start
    assert verdict == ("accepted" if valid else "refused")


@pytest.mark.parametrize("B", B_BOTH_SIDES, ids=lambda B: f"B{B}")
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int8], ids=lambda d: d.__name__)
def test_other_integer_dtypes(dtype, B):
    """Unsigned values past S, and a narrow dtype's largest value, are refused on both host paths."""
    top = np.iinfo(dtype).max  # uint64: past int64, which numpy's path casts to
    for last, valid in (((0, 8), True), ((top, 0), False), ((0, top), False)):
        key_ranges = mx.array(np.array([[0, 8]] * (B - 1) + [list(last)], dtype=dtype))
        assert key_ranges_module.key_ranges_outside_on_host(key_ranges, 8) is (not valid)


def _attend(key_ranges, S):
    q = mx.random.normal((2, 4, 1, 8), key=mx.random.key(1))
    k, v = (mx.random.normal((2, 2, S, 8), key=mx.random.key(2 + i)) for i in (0, 1))
    return fa.decode_attention(q, k, v, key_ranges=key_ranges)


def test_key_ranges_not_read_back(forbid_key_ranges_read):
    pairs = [(3, S - 3), (0, S)]
    expected = _attend(mx.array(pairs), S)
    ranges = fa.KeyRanges(pairs)
    forbid_key_ranges_read()
    assert mx.array_equal(_attend(ranges, S), expected)
    assert mx.array_equal(_attend(ranges, S), expected)  # replayed: the same signature
    with pytest.raises(AssertionError, match="read back"):  # a caller's equal array is read
        _attend(mx.array(pairs), S)


def test_key_ranges_checked_against_each_call():
    """Valid for every S >= end (the same result as the array there), refused below it and for
    another number of requests."""
    ranges = fa.KeyRanges([(3, S - 4), (0, 1)])
    assert ranges.min_keys == S - 1
    for keys in (S - 1, S, S + 5):
        assert mx.array_equal(_attend(ranges, keys), _attend(mx.array(ranges.pairs_for(keys)), keys))
    with pytest.raises(ValueError, match="key_ranges.*S = 14"):
        _attend(ranges, S - 2)
    with pytest.raises(ValueError, match="key_ranges must hold B = 2"):
        _attend(fa.KeyRanges([(0, S)]), S)


@pytest.mark.parametrize("start, length", [r for r in RANGES if not (0 <= r[0] <= S and 0 <= r[1] <= S - r[0])])
def test_key_ranges_refused_as_made(start, length):
    """Negative starts and lengths, and ends past the kernels' int32, are refused as made; ends
    past S only at the call (previous test)."""
    if start >= 0 and length >= 0 and start + length <= fa.key_ranges.INT32_MAX:
        assert fa.KeyRanges([(0, S), (start, length)]).min_keys == start + length
        return
    with pytest.raises(ValueError, match="key_ranges"):
        fa.KeyRanges([(0, S), (start, length)])


@pytest.mark.parametrize("ranges, error", [
    (5, TypeError), ("0 16", TypeError), ([], ValueError), ([(1, 2, 3)], ValueError), ([3], ValueError),
    ([(0, 1), (2,)], ValueError), ([(1.0, 2)], TypeError), ([(True, False)], TypeError), ([("a", "b")], TypeError),
    ([(None, 1)], TypeError), ([(2**70, 0)], TypeError), (np.zeros((2, 2)), TypeError), (np.zeros((2, 3), int), ValueError),
    (mx.array([[0, 1]], dtype=mx.float32), TypeError), (mx.array([[0, 1, 2]]), ValueError),
    (np.array([[2**64 - 1, 0]], dtype=np.uint64), ValueError),
    (mx.array(3), ValueError), (np.array(3), ValueError), ([(True, 3)], TypeError), ([[0, True]], TypeError),
])
def test_key_ranges_bad_input(ranges, error):
    with pytest.raises(error, match="key_ranges"):
        fa.KeyRanges(ranges)


@pytest.mark.parametrize("form", ["list", "tuple", "numpy ints", "int8", "uint64", "mlx int64", "mlx strided"])
def test_key_ranges_forms_and_their_own_copy(form):
    """Every accepted form gives the same pairs and kernel array; changing the source afterwards
    (in place, as MLX and numpy allow) does not change the KeyRanges."""
    pairs = [(3, 5), (0, 8), (7, 0)]
    source = {
        "list": [list(p) for p in pairs], "tuple": tuple(pairs),
        "numpy ints": [[np.int64(a), np.int32(b)] for a, b in pairs],
        "int8": np.array(pairs, dtype=np.int8), "uint64": np.array(pairs, dtype=np.uint64),
        "mlx int64": mx.array(pairs, dtype=mx.int64),
        "mlx strided": mx.array([[a, -1, b] for a, b in pairs])[:, ::2],
    }[form]
    ranges = fa.KeyRanges(source)
    array = ranges.checked_for(3, 8)
    assert ranges.pairs_for(8) == tuple(pairs) and ranges.min_keys == 8 and len(ranges) == 3
    assert array.dtype == mx.int32 and array.tolist() == [list(p) for p in pairs]
    if isinstance(source, list):
        source[0][0] = 99
    elif isinstance(source, (np.ndarray, mx.array)):
        source[0, 0] = 99
    assert ranges.pairs_for(8) == tuple(pairs) and ranges.checked_for(3, 8).tolist() == [list(p) for p in pairs]


def test_padding_ranges_for_every_S(forbid_key_ranges_read):
    """KeyRanges.from_padding: request b sees keys left[b] .. S - 1 - right[b] for each S, the
    same bits as that S's (start, length) array; refused where the padding needs more keys."""
    left, right = [3, 0], [1, 5]
    padded = fa.KeyRanges.from_padding(left=left, right=right)
    assert padded.min_keys == 5 and len(padded) == 2
    expected = {}
    for keys in (5, 9, S):
        pairs = [(a, keys - a - b) for a, b in zip(left, right)]
        assert padded.pairs_for(keys) == tuple(pairs)
        expected[keys] = _attend(mx.array(pairs), keys)
    forbid_key_ranges_read()
    for keys, out in expected.items():
        assert mx.array_equal(_attend(padded, keys), out)
    with pytest.raises(ValueError, match="key_ranges.*S = 4"):
        _attend(padded, 4)
    assert fa.KeyRanges.from_padding(left=[2]).pairs_for(7) == ((2, 5),)
    assert fa.KeyRanges.from_padding(right=np.array([2], dtype=np.uint8)).pairs_for(7) == ((0, 5),)


@pytest.mark.parametrize("kwargs, error", [
    ({}, ValueError), ({"left": [1], "right": [1, 2]}, ValueError), ({"left": [-1]}, ValueError),
    ({"right": [0, -2]}, ValueError), ({"left": [[1]]}, ValueError), ({"left": [1.5]}, TypeError),
    ({"left": 5}, TypeError), ({"left": []}, ValueError), ({"left": [2**31]}, ValueError),
    ({"left": [2**30], "right": [2**30]}, ValueError), ({"right": mx.array([True])}, TypeError),
    ({"left": mx.array(3)}, ValueError), ({"right": [2, True]}, TypeError),
])
def test_padding_ranges_bad_input(kwargs, error):
    with pytest.raises(error, match="^(left|right|KeyRanges.from_padding needs)"):
        fa.KeyRanges.from_padding(**kwargs)


@pytest.mark.parametrize("B, S, error", [(1, "a", TypeError), (1, None, TypeError), (1, 4.5, TypeError),
                                         ("1", 2, TypeError), (1, True, TypeError)])
def test_checked_for_bad_counts(B, S, error):
    with pytest.raises(error, match="^[BS] must be an int"):
        fa.KeyRanges([(0, 1)]).checked_for(B, S)
