"""KeyRanges: a batch's per-request (start, length) key ranges, checked once, as they are made.

A (B, 2) mx.array passed as `key_ranges` is read back on the host by every call, so that ranges
past the call's keys raise. On MLX's CUDA backend arrays live in managed memory: that read moves
the array's page to the host, and the kernels that read the ranges next wait for it to come back
(docs/gpu.md, "Key ranges checked once": 3-31% of a bf16 call on the H200). A KeyRanges holds
the Python ints it was made from, checked then; a call compares one of them, `end`, with its S.
"""

from __future__ import annotations

import operator

import mlx.core as mx
import numpy as np

INT32_MAX = 2**31 - 1  # the kernels read the ranges as int32


class KeyRanges:
    """Request b of a batch sees only keys start .. start + length - 1 (a padded batch).

        ranges = fa.KeyRanges([(pad, S - pad) for pad in left_padding])
        out = fa.decode_attention(q, k, v, key_ranges=ranges)

    Gives what the (B, 2) integer array of the same pairs gives, without reading anything back
    on the host at the call (module docstring). `ranges` is a list of (start, length) pairs of
    ints, or a (B, 2) integer numpy or MLX array (read once, here). Immutable: a decode loop whose
    lengths change makes a new one each step. Valid for any call with B = len(ranges) requests
    over S >= end keys.
    """

    __slots__ = ("_starts", "_lengths", "_end", "_array")

    def __init__(self, ranges):
        if isinstance(ranges, mx.array):
            if not mx.issubdtype(ranges.dtype, mx.integer):
                raise TypeError(f"key_ranges must have an integer dtype, got {ranges.dtype}")
            ranges = ranges.tolist()
        elif not isinstance(ranges, (list, tuple, np.ndarray)):
            raise TypeError(
                "key_ranges must be a list of (start, length) pairs or a (B, 2) integer array, "
                f"got {type(ranges).__name__}"
            )
        if len(ranges) == 0:
            raise ValueError("key_ranges must hold at least one request's (start, length)")
        array = None
        if not isinstance(ranges, np.ndarray):
            try:
                array = mx.array(ranges)  # Python ints: the common case, parsed by MLX
            except (ValueError, TypeError, RuntimeError):
                pass  # numpy ints (MLX takes no numpy scalars), or not ints at all: numpy tells
        if array is None:
            try:
                as_numpy = np.asarray(ranges)
            except ValueError as err:
                raise ValueError(f"key_ranges must be (start, length) pairs ({err})") from None
            if as_numpy.dtype.kind not in "iu":
                raise TypeError(f"key_ranges must hold ints, got {as_numpy.dtype}")
            ranges = as_numpy.tolist()
            try:
                array = mx.array(ranges)
            except RuntimeError:  # a uint64 past int64
                raise ValueError(f"key_ranges must hold start + length <= {INT32_MAX}") from None
        if not mx.issubdtype(array.dtype, mx.integer):
            raise TypeError(f"key_ranges must hold ints, got {array.dtype}")
        if array.ndim != 2 or array.shape[1] != 2:
            raise ValueError(f"key_ranges must have shape (B, 2), got {tuple(array.shape)}")
        starts, lengths = zip(*ranges)
        end = max(map(operator.add, starts, lengths))
        if min(starts) < 0 or min(lengths) < 0 or end > INT32_MAX:
            raise ValueError(
                f"key_ranges must hold 0 <= start, 0 <= length and start + length <= {INT32_MAX}, "
                f"got {[list(pair) for pair in zip(starts, lengths)]}"
            )
        self._starts, self._lengths, self._end = starts, lengths, end
        self._array = array if array.dtype == mx.int32 else array.astype(mx.int32)  # what the kernels read

    @property
    def pairs(self) -> tuple:
        """((start, length), ...), one pair a request."""
        return tuple(zip(self._starts, self._lengths))

    @property
    def end(self) -> int:
        """The fewest keys a call needs: the largest start + length."""
        return self._end

    def __len__(self):
        return len(self._starts)

    def __repr__(self):
        return f"KeyRanges({list(self.pairs)!r})"

    def checked_for(self, B, S):
        """The kernels' (B, 2) int32 array for a call of B requests over S keys, or ValueError."""
        if len(self._starts) != B:
            raise ValueError(f"key_ranges must hold B = {B} requests, got {len(self._starts)}")
        if self._end > S:
            raise ValueError(
                f"key_ranges must hold 0 <= start, 0 <= length and start + length <= S = {S} per "
                f"request, got start + length = {self._end}"
            )
        return self._array
