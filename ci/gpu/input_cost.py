"""What a custom kernel's inputs cost MLX's CUDA backend a call, and our 4-bit call against bf16.

    python3 ci/gpu/input_cost.py [B S]     # default B = 8, S = 8192; writes $OUT/input_cost_B_S.json

The 4-bit call builds for 27-37 µs a call before its kernels run, the bf16 call 11-21
(docs/h200/host-gaps/); its decode kernel takes 11 inputs and 11 shape or strides arguments
(plain: 7 and 6). Rows, µs a call:
- `host: ...`: calls made and dropped, never evaluated (best of 7 interleaved rounds of 1000):
  empty kernels of n = 1, 4, 7, 11 five-dimensional inputs, each with and without its strides
  passed (`name_strides` named in the body); our decode and merge kernels' calls; the public
  calls (replayed).
- `queued: ...`: the same calls queued 20 at a time and evaluated (best of 5 samples): host time,
  MLX's evaluation (CUDA graph nodes) and the GPU together.
"""
import json
import os
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu
from fusedattend._problem import plain_problem, quantized_problem

sys.path.insert(0, os.path.dirname(__file__))
from schedule_sweep import decode_inputs, queued_us  # noqa: E402


def empty_kernel(n, strides):
    names = [f"a{i}" for i in range(n)]
    named = " ".join(f"{name}_strides" for name in names) if strides else ""
    kernel = mx.fast.cuda_kernel(name=f"fa_inputs_{n}_{int(strides)}", input_names=names, output_names=["y"],
                                 source=f"/* {named} */\nif (threadIdx.x == 0) y[0] = 0.0f;\n",
                                 ensure_row_contiguous=False)
    return kernel


def main():
    B, S = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (8, 8192)
    q, k, v = decode_inputs(B, S)
    kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
    mx.eval(kq, vq)
    small = [mx.zeros((1, 2, 2, 2, 2), mx.bfloat16) for _ in range(11)]
    mx.eval(small)
    host, queued = {}, {}
    for n in (1, 4, 7, 11):
        for strides in (False, True):
            kernel = empty_kernel(n, strides)
            args = dict(inputs=small[:n], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)],
                        output_dtypes=[mx.float32])
            mx.eval(kernel(**args))
            label = f"empty kernel, {n} inputs{' + strides' if strides else ''}"
            host[label] = queued[label] = (lambda kernel=kernel, args=args: kernel(**args)[0])
    for quantized, arrays in ((False, (q, k, v)), (True, (q, *kq, *vq))):
        name = "4-bit" if quantized else "bf16"
        problem = (quantized_problem(q, kq, vq, None, None, None, 4, 64) if quantized
                   else plain_problem(q, k, v, None, None, None))
        launch = gpu.decode_launch(problem, quantized)
        decode = gpu._kernel(launch["name"], launch["input_names"], launch["output_names"],
                             launch["body_file"], launch["defines"], launch["launch_bounds"], launch["constants"])
        partials = decode(**launch["call"])
        mx.eval(partials)
        merge = gpu._kernel("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal",
                            constants=launch["merge_constants"])
        public = ((lambda: fa.quantized_decode_attention(q, kq, vq, backend="cuda")) if quantized
                  else (lambda: fa.decode_attention(q, k, v, backend="cuda")))
        rows = {f"{name} decode kernel": lambda decode=decode, launch=launch: decode(**launch["call"])[0],
                f"{name} merge kernel": lambda merge=merge, p=partials, launch=launch: merge(
                    inputs=list(p), **launch["merge_args"])[0],
                f"{name} public call": public}
        host.update(rows)
        queued.update(rows)
    queued["mx.fast.sdpa"] = host["mx.fast.sdpa"] = lambda: mx.fast.scaled_dot_product_attention(
        q, k, v, scale=128 ** -0.5)
    for fn in host.values():
        mx.eval(fn())
    best = dict.fromkeys(host, float("inf"))
    for _ in range(7):  # every row each round: the host's speed drifts
        for name, fn in host.items():
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / 1000 * 1e6)
    result = {f"host: {name}": round(us, 2) for name, us in best.items()}
    result.update({f"queued: {name}": round(queued_us(fn), 1) for name, fn in queued.items()})
    result.update(B=B, S=S, mlx=mx.__version__)
    for key, value in result.items():
        print(f"{key:50s} {value}")
    with open(os.path.join(os.environ.get("OUT", "."), f"input_cost_{B}_{S}.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
