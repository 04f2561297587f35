"""Does the host's read of key_ranges (the values check, every call) cost the GPU time?

    python3 docs/h200/key-ranges/host_read.py attention B S     # one decode call, 20 queued
    python3 docs/h200/key-ranges/host_read.py model B C [C ...] # ci/gpu/mlx_lm_decode.py --padded's model

MLX's CUDA backend keeps arrays in managed memory. `_problem._key_ranges` reads a caller's (B, 2)
array on the host (`tolist`) every call, and the kernels read the same array on the GPU: if each
host read moves the page to the host, each kernel's first load waits for it to come back.
Attention variants, taking turns over the same arrays:
  read each call  a caller's array, as any caller's is checked;
  unchecked       the same, the values check skipped (`key_ranges_outside_on_host` returns
                  False): what the read costs (not a fix: bad ranges would go unchecked);
  host copy       the values read and checked, then handed to the kernels as a new array made
                  from them (mx.array of the Python ints), so no kernel reads a page the host
                  has just read;
  noted           ranges made once as a `fusedattend.KeyRanges` (checked as made, not read
                  back: what the mlx_lm integration passes; in calls 159-163 an array made by
                  `_problem.noted_key_ranges`, which KeyRanges replaced);
  KeyRanges each call  a new KeyRanges of the same pairs made for every call, as a decode loop
                  whose lengths change makes one each step (not in calls 159-163);
  all keys        no ranges, every request reads all S keys;
  mask            the padding as a boolean mask.
Model variants (the 8B-shaped model's left-padded decode, patched): "noted" (the package: one
KeyRanges.from_padding a cache since 1edd318), "mask" (ci/gpu/mlx_lm_decode.py's
patch_passing_masks). Calls 159-163 also ran "read each call" (the integration's ranges a plain
(B, 2) array a step, read back by each layer's call); it went when the integration took
from_padding, whose form no plain array can carry.
Request b holds S - b * S // (2 B) keys at the end of its row (mlx_lm_decode.padded_lengths).
Attention: bf16, H_q = 32, H_kv = 8, D = 128, L = 1, µs a call, 20 calls queued an evaluation,
median of 15 rounds. Model: HOST_READ_LAYERS layers (32 unless set), ms a token, median of 3
rounds.
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
def replaced(module, name, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def checked_copy(key_ranges, B, S):
    values = key_ranges.tolist()
    if any(_problem.key_ranges_outside(start, length, S) for start, length in values):
        raise ValueError("key_ranges outside [0, S]")
    return mx.array(values, dtype=mx.int32)


def attention(B, S):
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k, v = (mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16) for _ in range(2))
    pairs = [(S - n, n) for n in decode_script.padded_lengths(B, S)]
    ranges = mx.array(pairs, dtype=mx.int32)
    noted = fa.KeyRanges(pairs)
    mask = (mx.arange(S)[None, :] >= mx.array([p for p, _ in pairs])[:, None]).reshape(B, 1, 1, S)
    mx.eval(q, k, v, ranges, mask)
    with_ranges = lambda: fa.decode_attention(q, k, v, key_ranges=ranges)  # noqa: E731
    impls = {
        "read each call": (contextlib.nullcontext, with_ranges),
        "unchecked": (lambda: replaced(_problem, "key_ranges_outside_on_host", lambda r, S: False), with_ranges),
        "host copy": (lambda: replaced(_problem, "_key_ranges", checked_copy), with_ranges),
        "noted": (contextlib.nullcontext, lambda: fa.decode_attention(q, k, v, key_ranges=noted)),
        "KeyRanges each call": (contextlib.nullcontext,
                                lambda: fa.decode_attention(q, k, v, key_ranges=fa.KeyRanges(pairs))),
        "all keys": (contextlib.nullcontext, lambda: fa.decode_attention(q, k, v)),
        "mask": (contextlib.nullcontext, lambda: fa.decode_attention(q, k, v, mask=mask)),
    }
    reference = with_ranges()
    times = {name: [] for name in impls}
    for _ in range(16):
        for name, (context, fn) in impls.items():
            with context():
                if name not in ("all keys", "mask"):
                    assert mx.array_equal(fn(), reference).item(), name
                start = time.perf_counter()
                mx.eval([fn() for _ in range(20)])
                times[name].append((time.perf_counter() - start) / 20 * 1e6)
    print(f"attention B = {B}, S = {S}: " + ", ".join(
        f"{name} {statistics.median(t[1:]):.1f}" for name, t in times.items()) + " µs", flush=True)


def model(B, contexts):
    m = decode_script.build_model(int(os.environ.get("HOST_READ_LAYERS", 32)))
    variants = {"noted": (fa.patch_mlx_lm, contextlib.nullcontext),
                "mask": (decode_script.patch_passing_masks, contextlib.nullcontext)}
    for context in contexts:
        caches = decode_script.padded_caches(m, B, context)
        times = {name: [] for name in variants}
        for _ in range(3):
            for name, (patch, context_of) in variants.items():
                undo = patch()
                try:
                    with context_of():
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
