"""Does the host's read of key_ranges (the values check, every call) cost the GPU a page fault?

    python3 docs/h200/key-ranges/host_read.py attention B S     # one decode call, 20 queued
    python3 docs/h200/key-ranges/host_read.py model B C [C ...] # ci/gpu/mlx_lm_decode.py --padded's model

MLX's CUDA backend keeps arrays in managed memory. `_problem._key_ranges` reads the caller's
(B, 2) array on the host (`tolist`) every call, and the kernels read the same array on the GPU:
if each host read moves the page back to the host, each kernel's first load waits for it to come
back. Variants, taking turns:
  shipped      the package as it is;
  unchecked    the values check skipped (`key_ranges_outside_on_host` returns False): what the
               read costs, all of it (not a fix: bad ranges would go unchecked);
  host copy    the values read and checked as shipped, then handed to the kernels as a new array
               made from them (mx.array of the Python ints), so the GPU never reads a page the
               host has just read;
  all keys     (attention only) no ranges, every request reads all S keys;
  mask         the padding as a boolean mask (attention: passed to decode_attention; model:
               ci/gpu/mlx_lm_decode.py's patch_passing_masks).
Request b holds S - b * S // (2 B) keys at the end of its row (mlx_lm_decode.padded_lengths).
Attention: bf16, H_q = 32, H_kv = 8, D = 128, L = 1, µs a call, 20 calls queued an evaluation,
median of 15 rounds. Model: the 8B-shaped model's decode (HOST_READ_LAYERS layers, 32 unless
set), ms a token, median of 3 rounds.
"""
import contextlib
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

import fusedattend as fa
from fusedattend import _problem

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("mlx_lm_decode", ROOT / "ci/gpu/mlx_lm_decode.py")
decode_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(decode_script)


@contextlib.contextmanager
def unchecked():
    original = _problem.key_ranges_outside_on_host
    _problem.key_ranges_outside_on_host = lambda key_ranges, S: False
    try:
        yield
    finally:
        _problem.key_ranges_outside_on_host = original


@contextlib.contextmanager
def host_copy():
    original = _problem._key_ranges

    def checked_copy(key_ranges, B, S):
        if key_ranges is None:
            return None
        values = key_ranges.tolist()
        if any(_problem.key_ranges_outside(start, length, S) for start, length in values):
            raise ValueError("key_ranges outside [0, S]")
        return mx.array(values, dtype=mx.int32)

    _problem._key_ranges = checked_copy
    try:
        yield
    finally:
        _problem._key_ranges = original


shipped = contextlib.nullcontext


def attention(B, S):
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k, v = (mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16) for _ in range(2))
    pad = [S - n for n in decode_script.padded_lengths(B, S)]
    ranges = mx.array([[p, S - p] for p in pad], dtype=mx.int32)
    mask = (mx.arange(S)[None, :] >= mx.array(pad)[:, None]).reshape(B, 1, 1, S)
    mx.eval(q, k, v, ranges, mask)
    with_ranges = lambda: fa.decode_attention(q, k, v, key_ranges=ranges)  # noqa: E731
    impls = {"shipped": (shipped, with_ranges), "unchecked": (unchecked, with_ranges),
             "host copy": (host_copy, with_ranges),
             "all keys": (shipped, lambda: fa.decode_attention(q, k, v)),
             "mask": (shipped, lambda: fa.decode_attention(q, k, v, mask=mask))}
    reference = with_ranges()
    times = {name: [] for name in impls}
    for _ in range(16):
        for name, (context, fn) in impls.items():
            with context():
                if name in ("unchecked", "host copy"):
                    assert mx.array_equal(fn(), reference).item(), name
                start = time.perf_counter()
                mx.eval([fn() for _ in range(20)])
                times[name].append((time.perf_counter() - start) / 20 * 1e6)
    print(f"attention B = {B}, S = {S}: " + ", ".join(
        f"{name} {statistics.median(t[1:]):.1f}" for name, t in times.items()) + " µs", flush=True)


def model(B, contexts):
    m = decode_script.build_model(int(os.environ.get("HOST_READ_LAYERS", 32)))
    patches = {"shipped": shipped, "unchecked": unchecked, "host copy": host_copy}
    for context in contexts:
        caches = decode_script.padded_caches(m, B, context)
        times = {name: [] for name in [*patches, "mask"]}
        for _ in range(3):
            for name in times:
                if name == "mask":
                    undo = decode_script.patch_passing_masks()
                    ctx = contextlib.nullcontext()
                else:
                    undo, ctx = fa.patch_mlx_lm(), patches[name]()
                try:
                    with ctx:
                        times[name].append(decode_script.ms_per_token(m, caches, B, 16, 4))
                finally:
                    undo()
        print(f"model B = {B}, context {context}: " + ", ".join(
            f"{name} {statistics.median(t):.2f}" for name, t in times.items()) + " ms a token", flush=True)
        del caches
        mx.clear_cache()


if __name__ == "__main__":
    what, B, *rest = sys.argv[1:]
    if what == "attention":
        attention(int(B), int(rest[0]))
    else:
        model(int(B), [int(c) for c in rest])
