"""What a padded decode loop's key_ranges cost a step on MLX's CUDA backend, taken apart.

    python3 ci/gpu/padded_loop_cost.py [B] [S] [--each-step]   # default 8 2048; rows as JSON lines

--each-step evaluates every step before the next is built, as a server that samples each token
does (by default the loop's 20 steps are built, then evaluated at once, as tests/perf queues them).

Baseline 0031 (docs/h200/tip-b29a4b2/) timed tests/perf's padded loop at B = 8, S = 2048, bf16, at
120.3 µs a step against 84.4 for the same loop without key_ranges, where ci/gpu/key_ranges_pieces.py
puts 7.4 µs of host time on a call with key_ranges. This loop is the perf row's (20 chained steps
on a cache one key longer each step, request b's keys from bench.left_pads), with the ranges:
- "made from Python each step" (the perf row until fusedattend.KeyRanges): mx.array of a list,
  new memory each step that the host writes, reads back to check it, and the kernels then read
  (MLX's CUDA arrays are managed memory);
- "a KeyRanges made each step": fusedattend.KeyRanges of the same pairs, checked as made, never
  read back on the host; its array is new host-written memory each step all the same;
- "one KeyRanges.from_padding for the loop" (the perf row since): one KeyRanges and one array for
  every step (the kernels end each range at S);
- "made once": the same steps' arrays, made and evaluated before the loop (the same values:
  only where the array comes from differs);
- "made once, never read on the host": those arrays, the check skipped (key_ranges_cost.unchecked,
  that probe's "no check" variant; timing only: a host read of a page the GPU read last moves it
  back to the host);
- "from Python, copied on the GPU": the perf row's array, with its kernels' form made by an MLX op
  (a copy the GPU writes) instead of handed over as it is;
- "none": no key_ranges (the unpadded loop);
- "none, an unused array made from Python each step": no key_ranges, but the perf row's array made
  each step all the same (and kept for the loop): what making it costs where nothing reads it;
  "..., never freed" keeps every such array to the end of the run (no buffer of MLX's cache is
  written again); "..., 64 KiB" makes one of 16384 int32 (through numpy) instead; "none, an
  unused array made by an MLX op each step" makes it on the GPU (memory the host never writes);
- "(constants on the device)": our kernels' constant inputs (gpu._int32s, gpu._float32s: dims,
  the softmax scale) written once by an MLX op into a fresh buffer (mx.clear_cache() first:
  device memory from MLX's stream-ordered pool) instead of made from Python (managed memory).
  Calls 117-118 ran this form; call 120 ran the form then shipped, the op without
  mx.clear_cache(), against "(constants made from Python)"; neither is shipped
  (docs/h200/host-arrays/);
- MLX's SDPA with the boolean mask those ranges stand for, made each step (bench.padded_mask:
  the perf rows' peer), and without a mask.
Every loop runs the same steps (S to S + STEPS - 1 keys), so the variants read the same keys.
Reported per variant, medians over ROUNDS rounds taken in turn: a step's wall µs, CUPTI's kernels
summed a step, the decode kernel's median, and each kind of kernel's µs a step. (Before
2026-12-02 one counter ran on through every loop, so each variant's loops were on other S, and
"made once" reused the first step's array: its kernels read up to a third fewer keys than the
others'.) Calls 112-116 (docs/h200/range-words/) ran it with the ranges by value, and with the
constant inputs padded, beside these: changes not kept (their variants are in that folder's
patches).

    PADDED_ROUNDS=15 PADDED_VARIANTS="made from|none" python3 ci/gpu/padded_loop_cost.py 8 2048

picks more rounds and the variants whose names start with one of the |-separated prefixes.
"""
import functools
import json
import os
import re
import statistics
import sys
import time

import mlx.core as mx
import numpy as np

import fusedattend as fa
from fusedattend import _problem, bench, gpu

sys.path.insert(0, os.path.dirname(__file__))
from kernel_gaps import profiled_kernels  # noqa: E402
from key_ranges_cost import unchecked  # noqa: E402

STEPS, ROUNDS = 20, int(os.environ.get("PADDED_ROUNDS", "5"))
ONLY = os.environ.get("PADDED_VARIANTS", "")  # variants whose names start with one of these (|-separated)
SHIPPED_KERNEL_FORM, SHIPPED_CHECK = _problem.kernel_key_ranges, _problem._key_ranges


def copied_on_the_gpu(key_ranges):
    return SHIPPED_KERNEL_FORM(key_ranges) + 0


def unused(array):
    """Keeps a Python-made array for the loop's steps; the call gets no key_ranges (None)."""
    kept.append(array)
    del kept[:-STEPS]
    return None


kept = []
kept_forever = []


def unused_forever(array):
    """unused, but the array stays alive to the end of the run."""
    kept_forever.append(array)
    return None


def on_the_device(make):
    """A constant input maker like gpu._int32s whose arrays an MLX op writes once into a fresh
    buffer: MLX's CUDA allocator gives an op's output device memory (cudaMallocAsync) unless its
    cache hands back a buffer of that size, which mx.clear_cache() empties first."""
    @functools.lru_cache(maxsize=256)
    def made(*values):
        host = make(*values)
        mx.clear_cache()
        out = host * 1
        mx.eval(out)
        return out
    return made


SHIPPED_CONSTANTS = gpu._int32s, gpu._float32s
DEVICE_CONSTANTS = tuple(on_the_device(make) for make in SHIPPED_CONSTANTS)


def use_constants(makers):
    """Our kernels' constant inputs from these makers from the next call on (launches rebuilt)."""
    if (gpu._int32s, gpu._float32s) != makers:
        gpu.set_constants(dict(zip(("_int32s", "_float32s"), makers)))


def main():
    each_step = "--each-step" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--each-step"]
    B = int(args[0]) if len(args) > 0 else 8
    S = int(args[1]) if len(args) > 1 else 2048
    case = bench.make_case(B, S + STEPS, "bfloat16")
    k, v, q, scale = case["k"], case["v"], case["q"], case["scale"]
    pads = bench.left_pads(B)
    padding = bench.padded_key_ranges(pads)
    once = {keys: bench.padded_key_range_array(pads, keys) for keys in range(S, S + STEPS)}
    mx.eval(list(once.values()))
    wide = np.zeros(16384, dtype=np.int32)
    pads_on_gpu = mx.array(pads, dtype=mx.int32)

    def ours(ranges):
        return lambda x, keys: fa.decode_attention(x, bench.first_keys(k, keys), bench.first_keys(v, keys),
                                                   scale=scale, key_ranges=ranges(keys), backend="cuda")

    def sdpa(masked):
        return lambda x, keys: mx.fast.scaled_dot_product_attention(
            x, bench.first_keys(k, keys), bench.first_keys(v, keys), scale=scale,
            mask=bench.padded_mask(pads, keys) if masked else None)

    variants = {
        "made from Python each step": ours(lambda keys: bench.padded_key_range_array(pads, keys)),
        "a KeyRanges made each step": ours(lambda keys: fa.KeyRanges([(p, keys - p) for p in pads])),
        "one KeyRanges.from_padding for the loop": ours(lambda keys: padding),
        "made once": ours(lambda keys: once[keys]),
        "made once, never read on the host (check skipped)": ours(lambda keys: once[keys]),
        "from Python, copied on the GPU": ours(lambda keys: bench.padded_key_range_array(pads, keys)),
        "none": ours(lambda keys: None),
        "none, an unused array made from Python each step": ours(lambda keys: unused(bench.padded_key_range_array(pads, keys))),
        "none, an unused array made from Python each step, never freed":
            ours(lambda keys: unused_forever(bench.padded_key_range_array(pads, keys))),
        "none, an unused array made from Python each step, 64 KiB": ours(lambda keys: unused(mx.array(wide + keys))),
        "none, an unused array made by an MLX op each step":
            ours(lambda keys: unused(mx.stack([pads_on_gpu, keys - pads_on_gpu], axis=1))),
        "made from Python each step (constants on the device)": ours(lambda keys: bench.padded_key_range_array(pads, keys)),
        "none (constants on the device)": ours(lambda keys: None),
        "none, an unused array made from Python each step (constants on the device)":
            ours(lambda keys: unused(bench.padded_key_range_array(pads, keys))),
        "MLX's SDPA, the boolean mask made each step (the perf rows' peer)": sdpa(True),
        "MLX's SDPA, no mask": sdpa(False),
    }

    if ONLY:
        variants = {name: step for name, step in variants.items() if name.startswith(tuple(ONLY.split("|")))}

    def loop(step):
        x = q
        for keys in range(S, S + STEPS):
            x = step(x, keys)
            if each_step:
                mx.eval(x)
        mx.eval(x)

    samples, by_kind = {}, {}
    for _ in range(ROUNDS):
        for name, step in variants.items():
            _problem.kernel_key_ranges = copied_on_the_gpu if "copied" in name else SHIPPED_KERNEL_FORM
            _problem._key_ranges = unchecked if "never read" in name else SHIPPED_CHECK
            use_constants(DEVICE_CONSTANTS if "constants on the device" in name else SHIPPED_CONSTANTS)
            loop(step)
            kernels = profiled_kernels(lambda: loop(step))
            t0 = time.perf_counter()
            loop(step)
            wall = (time.perf_counter() - t0) / STEPS * 1e6
            decode = [dur for kname, _, dur in kernels if "fa_" in kname and "merge" not in kname]
            samples.setdefault(name, []).append(
                (wall, sum(d for _, _, d in kernels) / STEPS, statistics.median(decode) if decode else 0.0))
            for kname, _, dur in kernels:
                kind = by_kind.setdefault(name, {}).setdefault(short_name(kname), [0.0] * ROUNDS)
                kind[len(samples[name]) - 1] += dur / STEPS
    _problem.kernel_key_ranges, _problem._key_ranges = SHIPPED_KERNEL_FORM, SHIPPED_CHECK
    use_constants(SHIPPED_CONSTANTS)
    for name, got in samples.items():
        wall, kernels, decode = (statistics.median(x) for x in zip(*got))
        print(json.dumps(dict(B=B, S=S, each_step=each_step, key_ranges=name, step_wall_us=round(wall, 1),
                              all_kernels_us_a_step=round(kernels, 1), decode_kernel_us_median=round(decode, 1),
                              kernels_us_a_step_by_name={k: round(statistics.median(v), 1)
                                                         for k, v in by_kind[name].items()},
                              rounds=[[round(x, 1) for x in r] for r in got])), flush=True)


def short_name(kernel):
    """A kernel's name without MLX's prefix, its digest and its arguments."""
    name = kernel.split("(")[0].replace("mlx::core::cu::", "").replace("custom_kernel_", "")
    return re.sub(r"_[0-9a-f]{12}$", "", name)[:60]


if __name__ == "__main__":
    main()
