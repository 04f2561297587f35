"""What checking a call's key_ranges costs the caller: the package's check (`_problem._key_ranges`,
on the host since 8ad17c7: numpy, since b29a4b2 Python ints up to B = 32) against the form before
it (MLX ops, then `.item()`), and a `fusedattend.KeyRanges` of the same pairs (checked when it was
made; made once here, as a decode step's layers share it), µs a call on MLX's default device, best
of 5 repeats. Making the KeyRanges is timed too: once a step, or once a loop (`from_padding`).

    python ci/key_ranges_check.py [S]   # default 2048; B = 1, 8, 32, 33, 256

Each call gets a key_ranges array already evaluated, as a decode step's layers would.
"""
import sys
import timeit

import mlx.core as mx

from fusedattend import KeyRanges
from fusedattend._problem import _key_ranges, kernel_key_ranges, key_ranges_outside


def check_as_mlx_ops(key_ranges, B, S):
    """The check as it was until 8ad17c7 (but for the sum that could wrap around), for comparison."""
    ranges = key_ranges.astype(mx.int64)
    if mx.any(key_ranges_outside(ranges[:, 0], ranges[:, 1], S)).item():
        raise ValueError("key_ranges")
    return kernel_key_ranges(key_ranges)


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    print(f"mlx {mx.__version__}, {mx.default_device()}, S = {S}")
    for B in (1, 8, 32, 33, 256):
        key_ranges = mx.array([[0, S]] * B, dtype=mx.int32)
        mx.eval(key_ranges)
        pairs = [(0, S)] * B
        made = KeyRanges(pairs)
        timed = {
            "array, read back": lambda: _key_ranges(key_ranges, B, S),
            "array, MLX ops": lambda: check_as_mlx_ops(key_ranges, B, S),
            "KeyRanges": lambda: _key_ranges(made, B, S),
            "making KeyRanges": lambda: KeyRanges(pairs),
        }
        for name, call in timed.items():
            number = 1000
            best = min(timeit.repeat(call, number=number, repeat=5))
            print(f"B = {B:3d}  {name:18s} {best / number * 1e6:7.1f} µs a call", flush=True)


if __name__ == "__main__":
    main()
