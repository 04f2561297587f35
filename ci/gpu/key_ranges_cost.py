"""What a call's key_ranges costs a decode step on MLX's CUDA backend, by where the array was made
and how its values are checked.

    python3 ci/gpu/key_ranges_cost.py [S]   # default 2048; rows as JSON lines

MLX's CUDA arrays live in managed memory (mlx/backend/cuda/allocator.cpp): arrays of at most 8
bytes in a small pool advised read-mostly, every larger one in an allocation of its own, recycled
through a cache. A page the host touched (a Python-made array; one host read, as
`_problem._key_ranges` does since 8ad17c7: numpy, since b29a4b2 Python ints up to B = 32) moves to the GPU again when a kernel reads it. In call
99 (docs/h200/key-ranges-host/) a GPU-made key_ranges at B = 8 read by numpy doubled the decode
kernel's time once (call 100 did not repeat that at one call a step). This probe times each check against each way of making the array, at B = 1 (8
bytes: the pool) and larger B, with one call a step and with LAYERS calls queued a step (one
decode step of a model's layers, evaluated once): a check that waits for the GPU (`.item()`)
also stops the host from queueing the next layer's call. Since 6e60b02 a repeated call with
key_ranges replays its launches (backends.replay) and checks only their values; the variants
"set up every call" patch the signature as before it (calls with key_ranges never repeat).
Rounds take the variants in turn. Reported: CUPTI's kernels summed a step, the decode kernel's
median, and a step's wall time; the form "none" passes no key_ranges, for comparison. (Calls 99-101
named the host check's variants "numpy, ...".)
"""
import json
import os
import statistics
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import _problem, api, gpu

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from kernel_gaps import profiled_kernels  # noqa: E402
from key_ranges_check import check_as_mlx_ops  # noqa: E402
from schedule_sweep import decode_inputs  # noqa: E402

STEPS, ROUNDS, LAYERS = 20, 3, 8


def made_from_python(B, S, base):
    return mx.array([[0, S]] * B, dtype=mx.int32)


def made_on_the_gpu(B, S, base):
    # an MLX op's output, as when a decode loop keeps its ranges as an array and steps them there
    return mx.minimum(base, S)


FORMS = {"from Python": made_from_python, "made on the GPU": made_on_the_gpu, "none": lambda B, S, base: None}


@mx.compile
def _outside(key_ranges, S):
    ranges = key_ranges.astype(mx.int64)
    return mx.any(_problem.key_ranges_outside(ranges[:, 0], ranges[:, 1], S))


def mlx_ops_compiled(key_ranges, B, S):
    """The MLX-op check fused by mx.compile (S an input, so a growing cache does not recompile it),
    one bool read back: never reads the caller's array on the host."""
    if _outside(key_ranges, mx.array(S, dtype=mx.int64)).item():
        raise ValueError("key_ranges")
    return _problem.kernel_key_ranges(key_ranges)


def unchecked(key_ranges, B, S):
    """_problem._key_ranges without the check of the values: the kernels' form, never read on the host."""
    return _problem.kernel_key_ranges(key_ranges)


def never_repeated(signature):
    """call_signature as before this commit: None (check in full, no replay) for key_ranges."""
    def call_signature(arrays, scale, mask, key_ranges, *options):
        return None if key_ranges is not None else signature(arrays, scale, mask, key_ranges, *options)
    return call_signature


SHIPPED_SIGNATURE = _problem.call_signature
# (the check, whether a repeat with key_ranges replays)
VARIANTS = {
    "host check, replayed (shipped)": (_problem._key_ranges, True),
    "host check, set up every call": (_problem._key_ranges, False),
    "MLX ops (until 8ad17c7), set up every call": (check_as_mlx_ops, False),
    "MLX ops, compiled, replayed": (mlx_ops_compiled, True),
    "no check, replayed": (unchecked, True),
}


def use(variant):
    check, replayed = VARIANTS[variant]
    _problem._key_ranges = check
    signature = SHIPPED_SIGNATURE if replayed else never_repeated(SHIPPED_SIGNATURE)
    _problem.call_signature = api.call_signature = signature
    gpu.clear_caches()


def timed(step):
    """(kernels summed a step, decode kernel's median, wall a step), µs, over STEPS steps each."""
    kernels = profiled_kernels(lambda: [step() for _ in range(STEPS)])
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    wall = (time.perf_counter() - t0) / STEPS * 1e6
    decode = [dur for name, _, dur in kernels if "fa_decode" in name]
    return sum(d for _, _, d in kernels) / STEPS, statistics.median(decode), wall


def rows(S):
    shipped = _problem._key_ranges
    out = []
    for B in (1, 8, 32):
        q, k, v = decode_inputs(B, S)
        base = mx.array([[0, S]] * B, dtype=mx.int32)
        mx.eval(base)
        for layers in (1, LAYERS):
            samples, outputs = {}, {}
            for _ in range(ROUNDS):
                for form, make in FORMS.items():
                    for check_name in VARIANTS if form != "none" else list(VARIANTS)[:1]:
                        use(check_name)

                        def step():
                            key_ranges = make(B, S, base)
                            outs = [fa.decode_attention(q, k, v, key_ranges=key_ranges, backend="cuda")
                                    for _ in range(layers)]
                            mx.eval(outs)
                            outputs[form, check_name] = outs[-1]

                        for _ in range(3):
                            step()
                        samples.setdefault((form, check_name), []).append(timed(step))
            for (form, check_name), got in samples.items():
                kernels, decode, wall = (statistics.median(x) for x in zip(*got))
                row = dict(B=B, S=S, layers=layers, key_ranges=form, check=check_name if form != "none" else "-",
                           all_kernels_us_a_step=round(kernels, 2), decode_us_median=round(decode, 2),
                           step_wall_us=round(wall, 2), rounds=[[round(x, 1) for x in r] for r in got])
                print(json.dumps(row), flush=True)
                out.append(row)
            same = all(mx.array_equal(outputs[key], o).item() for key in outputs for o in outputs.values())
            out.append(dict(B=B, S=S, layers=layers, outputs_bit_identical=same))
            print(json.dumps(out[-1]), flush=True)
    use("host check, replayed (shipped)")
    assert _problem._key_ranges is shipped
    return out


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    result = rows(S)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"key_ranges_cost_{S}.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
