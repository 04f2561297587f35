"""Buffers that end at a no-access page, for the CPU emulation of the kernels (cpu_emulator.py).

A kernel that reads one element past an input (a key past the block's end that it then masks,
say) changes no output, so no comparison shows it; on a GPU it reads whatever lies there, or
faults past an allocation. Here every buffer handed to a kernel is a copy whose last byte sits
right before a page mapped PROT_NONE: such a read faults at once, and cpu_compat.h turns the
fault into an error naming the buffer (EmulatedFault).

Only what lies past the end is guarded: the copy spans the array's elements from its lowest to
its highest address (strides as passed, broadcast axes included), nothing of a larger buffer it
was sliced from, so a read of a cache's spare keys past S faults too, as it must.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class EmulatedFault(RuntimeError):
    """An emulated kernel touched memory it must not (a guard page, or anything unmapped)."""


def _extent(a: np.ndarray):
    """(lowest, highest + 1) byte offsets of a's elements from its first element."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + a.itemsize
    return lo, hi


class GuardedBuffers:
    """Copies of arrays, each ending at a no-access page; `close` unmaps them all."""

    def __init__(self):
        self._maps = []  # (address, bytes, guard page address, name)

    def place(self, a: np.ndarray, name: str, *, copy: bool = True) -> np.ndarray:
        """a's elements at the same strides, its highest byte the last before a guard page.
        copy=False: the same shape and strides, contents left as mapped (zeros)."""
        if a.size == 0:
            return a
        lo, hi = _extent(a)
        span = hi - lo
        data_bytes = -(-span // PAGE) * PAGE
        total = data_bytes + PAGE
        addr = _libc.mmap(None, total, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        guard = addr + data_bytes
        if _libc.mprotect(guard, PAGE, PROT_NONE) != 0:
            _libc.munmap(addr, total)
            raise OSError(ctypes.get_errno(), "mprotect failed")
        self._maps.append((addr, total, guard, name))
        start = guard - span  # the lowest element's byte
        if copy:
            ctypes.memmove(start, a.ctypes.data + lo, span)
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(start))
        first = raw[-lo:] if lo else raw
        return np.lib.stride_tricks.as_strided(first.view(a.dtype), shape=a.shape, strides=a.strides)

    def owner_of(self, address: int):
        """What `address` falls in: 'past the end of NAME' for a guard page, else None."""
        for addr, total, guard, name in self._maps:
            if guard <= address < guard + PAGE:
                return f"{address - guard} bytes past the end of {name}"
            if addr <= address < guard:
                return f"within {name}"
        return None

    def close(self):
        for addr, total, _, _ in self._maps:
            _libc.munmap(addr, total)
        self._maps.clear()
