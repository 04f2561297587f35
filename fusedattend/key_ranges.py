"""KeyRanges: a batch's per-request (start, length) key ranges, checked once, as they are made.

A (B, 2) mx.array passed as `key_ranges` is read back on the host by every call, so that ranges
past the call's keys raise. On MLX's CUDA backend arrays live in managed memory: that read moves
the array's page to the host, and the kernels that read the ranges next wait for it to come back
(docs/decisions/key-ranges-checked-once.md: 3-31% of a bf16 call on the H200). A KeyRanges holds
the Python ints it was made from, checked then; a call compares one int, `min_keys`, with its S.

`KeyRanges.from_padding` says where each request's keys are by its padding (left: before its
first key, right: after its last), which does not change while a decode loop's cache grows: one
KeyRanges, one array, serves every step. Each array made from Python is new managed memory the
host has written, and the first kernel to read it waits for its page: 25-27 µs of a 110-150 µs
padded step at B = 8 and 32, S = 2048, queued, on the H200 (docs/decisions/key-ranges-checked-once.md).

The kernels read two int32 words a request: the start, then the length or, where negative,
-(right + 1): the range ends `right` keys before S (`key_range_end`).
"""

from __future__ import annotations

import operator

import mlx.core as mx
import numpy as np

INT32_MAX = 2**31 - 1  # the kernels read the ranges as int32


def _parsed(values, name, ndim, what):
    """`values` (a list, a tuple, a numpy or an MLX integer array) as an MLX integer array of
    `ndim` axes, parsed by MLX (numpy's parse where MLX refuses: numpy ints), or TypeError /
    ValueError naming `name`."""
    shape = "(B, 2)" if ndim == 2 else "(B,)"
    if isinstance(values, (mx.array, np.ndarray)) and values.ndim == 0:
        raise ValueError(f"{name} must have shape {shape}, got ()")
    if isinstance(values, mx.array):
        if not mx.issubdtype(values.dtype, mx.integer):
            raise TypeError(f"{name} must have an integer dtype, got {values.dtype}")
        values = values.tolist()
    elif not isinstance(values, (list, tuple, np.ndarray)):
        raise TypeError(f"{name} must be a list of {what} or an integer array, got {type(values).__name__}")
    if len(values) == 0:
        raise ValueError(f"{name} must hold at least one request's {what}")
    array = None
    if not isinstance(values, np.ndarray):
        try:
            array = mx.array(values)  # Python ints: the common case
        except (ValueError, TypeError, RuntimeError):
            pass  # numpy ints (MLX takes no numpy scalars), or not ints at all: numpy tells
    if array is None:
        try:
            as_numpy = np.asarray(values)
        except ValueError as err:
            raise ValueError(f"{name} must be a list of {what} ({err})") from None
        if as_numpy.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold ints, got {as_numpy.dtype}")
        values = as_numpy.tolist()
        try:
            array = mx.array(values)
        except RuntimeError:  # a uint64 past int64
            raise ValueError(f"{name} must hold ints of at most {INT32_MAX}") from None
    if not mx.issubdtype(array.dtype, mx.integer):
        raise TypeError(f"{name} must hold ints, got {array.dtype}")
    if array.ndim != ndim or (ndim == 2 and array.shape[1] != 2):
        raise ValueError(f"{name} must have shape {shape}, got {tuple(array.shape)}")
    if isinstance(values, (list, tuple)) and any(
            type(x) is bool for row in values for x in (row if ndim == 2 else (row,))):
        raise TypeError(f"{name} must hold ints, not bools")  # MLX reads [(True, 3)] as ints
    return values, array


def _non_negative(columns, name, what):
    if min(min(column) for column in columns) < 0:
        raise ValueError(f"{name} must hold 0 <= {what}, got {[list(row) for row in zip(*columns)]}")


class KeyRanges:
    """Request b of a batch sees only keys start .. start + length - 1 (a padded batch).

        ranges = fa.KeyRanges([(pad, S - pad) for pad in left_padding])   # for S keys or more
        ranges = fa.KeyRanges.from_padding(left=left_padding)             # for every S
        out = fa.decode_attention(q, k, v, key_ranges=ranges)

    Gives what the (B, 2) integer array of the same (start, length) pairs gives, without reading
    anything back on the host at the call (module docstring). `ranges` is a list of (start,
    length) pairs of ints, or a (B, 2) integer numpy or MLX array (read once, here). Immutable.
    Valid for any call with B = len(self) requests over S >= min_keys keys.
    """

    __slots__ = ("_starts", "_seconds", "_min_keys", "_array")

    def __init__(self, ranges):
        pairs, array = _parsed(ranges, "key_ranges", 2, "(start, length) pairs")
        starts, lengths = zip(*pairs)
        _non_negative((starts, lengths), "key_ranges", "start and 0 <= length")
        self._set(starts, lengths, max(map(operator.add, starts, lengths)), array)

    @classmethod
    def from_padding(cls, left=None, right=None):
        """Request b sees keys left[b] .. S - 1 - right[b] of any S: its padding, in keys, before
        its first key and after its last. A left-padded batch (mlx_lm's BatchKVCache) gives
        `left`; requests of different lengths at the start of one buffer give `right`. Either
        list may be left out (no padding on that side); valid where S >= left[b] + right[b]."""
        if left is None and right is None:
            raise ValueError("KeyRanges.from_padding needs left, right or both")
        left = None if left is None else tuple(_parsed(left, "left", 1, "padding lengths")[0])
        right = None if right is None else tuple(_parsed(right, "right", 1, "padding lengths")[0])
        if left is not None and right is not None and len(left) != len(right):
            raise ValueError(f"left and right must hold one int a request, got {len(left)} and {len(right)}")
        left = left or (0,) * len(right)
        right = right or (0,) * len(left)
        _non_negative((left, right), "left and right", "padding")
        self = cls.__new__(cls)
        self._set(left, tuple(-(r + 1) for r in right), max(map(operator.add, left, right)), name="left + right")
        return self

    def _set(self, starts, seconds, min_keys, array=None, name="key_ranges"):
        if min_keys > INT32_MAX:
            raise ValueError(f"{name} must need at most {INT32_MAX} keys, got {min_keys}")
        self._starts, self._seconds, self._min_keys = starts, seconds, min_keys
        if array is None or array.dtype != mx.int32:
            array = mx.array(list(zip(starts, seconds)), dtype=mx.int32)
        self._array = array  # what the kernels read: (B, 2) int32, row-major

    @property
    def min_keys(self) -> int:
        """The fewest keys a call needs: the largest start + length (left + right)."""
        return self._min_keys

    def pairs_for(self, S) -> tuple:
        """((start, length), ...) over S keys, one pair a request."""
        self.checked_for(len(self), S)
        return tuple((start, key_range_end(start, second, S) - start)
                     for start, second in zip(self._starts, self._seconds))

    def __len__(self):
        return len(self._starts)

    def __repr__(self):
        if self._seconds[0] < 0:  # from_padding: every second word is -(right + 1); a pair's, its length >= 0
            return (f"KeyRanges.from_padding(left={list(self._starts)!r}, "
                    f"right={[-(s + 1) for s in self._seconds]!r})")
        return f"KeyRanges({list(zip(self._starts, self._seconds))!r})"

    def checked_for(self, B, S):
        """The kernels' (B, 2) int32 array for a call of B requests over S keys, or ValueError."""
        B, S = _count(B, "B"), _count(S, "S")
        if len(self._starts) != B:
            raise ValueError(f"key_ranges must hold B = {B} requests, got {len(self._starts)}")
        if self._min_keys > S:
            raise ValueError(
                f"key_ranges must hold 0 <= start, 0 <= length and start + length <= S = {S} per "
                f"request, got ranges needing {self._min_keys} keys"
            )
        return self._array


def _count(n, name):
    if isinstance(n, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        return operator.index(n)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(n).__name__}") from None


def key_range_end(start, second, S):
    """One request's end of keys from its two words (module docstring)."""
    return start + second if second >= 0 else S + 1 + second


def checked_key_ranges(key_ranges, B, S):
    """A call's `key_ranges` validated for B requests of S keys: None, or the (B, 2) int32 array the
    kernels read. ValueError/TypeError naming `key_ranges` otherwise."""
    if key_ranges is None:
        return None
    if isinstance(key_ranges, KeyRanges):
        return key_ranges.checked_for(B, S)  # checked as it was made: nothing read back
    if not isinstance(key_ranges, mx.array):
        raise TypeError(
            "key_ranges must be a fusedattend.KeyRanges or an mlx.core.array of shape (B, 2), "
            f"got {type(key_ranges).__name__}"
        )
    if not mx.issubdtype(key_ranges.dtype, mx.integer):
        raise TypeError(f"key_ranges must have an integer dtype, got {key_ranges.dtype}")
    if tuple(key_ranges.shape) != (B, 2):
        raise ValueError(f"key_ranges must have shape (B, 2) = {(B, 2)}, got {tuple(key_ranges.shape)}")
    # The check reads the values, so it waits for them either way, then checks them on the host:
    # as MLX ops it cost GPU time on every call (docs/decisions/key-ranges-checked-once.md).
    if key_ranges_outside_on_host(key_ranges, S):
        raise ValueError(
            f"key_ranges must hold 0 <= start, 0 <= length and start + length <= S = {S} per request"
        )
    return kernel_key_ranges(key_ranges)


def key_ranges_outside(start, length, S):
    """Per request, whether (start, length) leaves [0, S]: elementwise, on numpy or MLX int64
    arrays alike. length > S - start, not start + length > S: that sum can wrap around in int64."""
    return (start < 0) | (length < 0) | (start > S) | (length > S - start)


# Up to this many requests the values are checked as Python ints, beyond it by numpy (a dozen
# small ops, about the same time at any B). Example: on a CPU host the ints took 0.4 µs a call at
# B = 1, 4.8 at B = 32 and 35 at B = 256, numpy 6-8 µs. Rule: ints while they cost less than
# numpy's fixed cost, which they do up to B = 32.
KEY_RANGES_AS_INTS_MAX_B = 32


def key_ranges_outside_on_host(key_ranges, S):
    """Whether any request's range of a (B, 2) integer mx.array leaves [0, S], read on the host."""
    if key_ranges.shape[0] <= KEY_RANGES_AS_INTS_MAX_B:
        return any(key_ranges_outside(start, length, S) for start, length in key_ranges.tolist())
    ranges = np.asarray(key_ranges).astype(np.int64)
    return bool(np.any(key_ranges_outside(ranges[:, 0], ranges[:, 1], S)))


def kernel_key_ranges(key_ranges):
    """key_ranges as the kernels read them: (B, 2) int32 row-major; a view (a column slice)
    reaches them as a copy."""
    return mx.contiguous(key_ranges.astype(mx.int32))
