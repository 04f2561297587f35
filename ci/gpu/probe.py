"""A few evaluated calls of each decode op at one shape, for a profiler to look at.

    ncu --clock-control none --metrics gpu__time_duration.sum,... python ci/gpu/probe.py B S

bf16, H_q = 32, H_kv = 8, D = 128, L = 1 (the shapes of issue 5). Each op is called and
evaluated 3 times on its own: fused bf16, fused 4-bit, mx.fast.scaled_dot_product_attention.
The kernels' names tell them apart: custom_kernel_fa_* are ours. PROBE_SET='{"NAME": value}'
sets constants of fusedattend.gpu first (as schedule_sweep's variants do).
"""
import json
import os
import sys

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu

sys.path.insert(0, os.path.dirname(__file__))
from schedule_sweep import decode_inputs  # noqa: E402


def main():
    B, S = (int(x) for x in sys.argv[1:3])
    gpu.set_constants(json.loads(os.environ.get("PROBE_SET", "{}")))
    q, k, v = decode_inputs(B, S)
    kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
    mx.eval(q, k, v, kq, vq)
    ops = {
        "fused bf16": lambda: fa.decode_attention(q, k, v, backend="cuda"),
        "fused q4": lambda: fa.quantized_decode_attention(q, kq, vq, backend="cuda"),
        "mx.fast.sdpa": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5),
    }
    for name, op in ops.items():
        for _ in range(3):
            mx.eval(op())
        print(f"probe: {name} B={B} S={S} done", flush=True)


if __name__ == "__main__":
    main()
