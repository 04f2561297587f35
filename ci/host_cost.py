"""Host time of a decode call on the "cuda" path with the kernels stubbed: what Python adds to a
call before MLX's own kernel call. Runs anywhere (no GPU): the stub returns fresh zeros.

    python ci/host_cost.py [B S [q4]]   # µs per call: checks, launch set-up, gpu path, public call

A repeated public call replays its launches (backends.replay): its row is the signature, the
lookup and the stubbed kernels; the rows between are what a call not replayed adds (a mask
array or key_ranges: the checks in full besides). The last three rows are public calls on the
first S keys of a longer cache (slicing included), at one S and with S one more each call (S to
2S - 1 in turn), as in a decode loop; the last adds a boolean mask (a slice of one), so that its
calls are checked and set up every time.

q4: the quantized call (4-bit K/V, group size 64) instead of the bf16 one.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

import fusedattend as fa  # noqa: E402
from fusedattend import _problem, backends, bench, gpu  # noqa: E402


class StubKernel:
    """Called as an mx.fast kernel object is; returns zeros of the output shapes."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *, output_shapes, output_dtypes, **kwargs):
        return [mx.zeros(shape, dtype) for shape, dtype in zip(output_shapes, output_dtypes)]


def per_call_us(fn, calls=20000, samples=5):
    fn()
    best = float("inf")
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def stub_cuda():
    """The "cuda" backend available here, its kernels StubKernel: what is left is host time."""
    gpu._kernel = StubKernel
    available = backends._is_available
    backends._is_available = lambda name: name == "cuda" or available(name)


def main(B=1, S=2048, fmt="bf16"):
    stub_cuda()
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    cache = mx.random.normal((B, 8, 2 * S, 128)).astype(mx.bfloat16)
    k = cache[:, :, :S]
    quantized = fmt == "q4"
    if quantized:
        cache = fa.quantize_kv(cache, bits=4, group_size=64)
        k = fa.quantize_kv(k, bits=4, group_size=64)
        make = lambda: _problem.quantized_problem(q, k, k, None, None, None, 4, 64)  # noqa: E731
        public = lambda: fa.quantized_decode_attention(q, k, k, backend="cuda")  # noqa: E731
        gpu_path = gpu.quantized_decode_attention
    else:
        make = lambda: _problem.plain_problem(q, k, k, None, None, None)  # noqa: E731
        public = lambda: fa.decode_attention(q, k, k, backend="cuda")  # noqa: E731
        gpu_path = gpu.decode_attention
    mx.eval(q, k, cache)
    problem = make()
    keys = [S]

    whole_mask = mx.ones((1, 1, 1, 2 * S), dtype=mx.bool_)

    def sliced(grow, masked=False):
        if grow:
            keys[0] = S + (keys[0] - S + 1) % S
        kv = bench.first_keys(cache, keys[0])
        mask = whole_mask[..., :keys[0]] if masked else None
        return fa.quantized_decode_attention(q, kv, kv, mask=mask, backend="cuda") if quantized else fa.decode_attention(
            q, kv, kv, mask=mask, backend="cuda")
    signature = lambda: (  # noqa: E731
        _problem.quantized_signature(q, k, k, None, None, None, 4, 64) if quantized
        else _problem.call_signature((q, k, k), None, None, None))
    rows = {
        "mx.zeros x2 (the stub's own cost)": lambda: (mx.zeros(q.shape, q.dtype), mx.zeros((1,), mx.float32)),
        "signature + replay lookup": lambda: backends.replay(signature(), "cuda"),
        "argument checks (repeat signature)": make,
        "launch set-up": lambda: gpu._launch_inputs(problem, quantized, problem.shape),
        "launcher (set-up + kernel objects)": lambda: gpu.launcher(problem, quantized),
        "gpu path (launcher + stubbed kernels)": lambda: gpu_path(problem),
        "public call (replayed)": public,
        "public call, cache slices, one S": lambda: sliced(False),
        "public call, cache slices, S + 1 a call": lambda: sliced(True),
        "the same with a mask array (not replayed)": lambda: sliced(True, masked=True),
    }
    for name, fn in rows.items():
        print(f"{name:40s} {per_call_us(fn):6.2f} µs")


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:3]), *sys.argv[3:4])
