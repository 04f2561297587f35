"""Sweep the GPU schedule constants of fusedattend.gpu (E, U, NSG, TARGET_BLOCKS) on decode shapes.

Prints µs per call, GB/s and the ratio to mx.fast.scaled_dot_product_attention, and the max error
against the reference run on the CPU stream. Writes $OUT/tune.json (or ./tune.json).

    python ci/gpu/schedule_sweep.py
"""
import json, os, time
import mlx.core as mx
import fusedattend as fa
from fusedattend import gpu

def bench(fn, reps=20, iters=5):
    mx.eval(fn())
    best = 1e9
    for _ in range(iters):
        t = time.perf_counter(); outs = [fn() for _ in range(reps)]; mx.eval(outs)
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6

shapes = [(1, 2048), (1, 32768), (8, 8192), (32, 2048), (32, 32768)]
data = {}
for B, S in shapes:
    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    v = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    mx.eval(q, k, v)
    with mx.stream(mx.cpu):
        ref = fa.decode_attention(q, k, v, backend="reference"); mx.eval(ref)
    data[(B, S)] = (q, k, v, ref, bench(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5)))
variants = [dict(E=8, U=1, NSG=8, TB=32), dict(E=8, U=2, NSG=4, TB=32), dict(E=4, U=2, NSG=8, TB=32),
            dict(E=4, U=4, NSG=4, TB=32), dict(E=4, U=4, NSG=8, TB=32), dict(E=4, U=2, NSG=4, TB=32),
            dict(E=4, U=2, NSG=8, TB=64)]
rows = []
for var in variants:
    gpu.ELEMENTS_PER_LANE, gpu.KEYS_IN_FLIGHT, gpu.SIMDGROUPS, gpu.TARGET_BLOCKS = var["E"], var["U"], var["NSG"], var["TB"]
    for (B, S), (q, k, v, ref, t_mlx) in data.items():
        out = fa.decode_attention(q, k, v, backend="cuda")
        err = mx.max(mx.abs(out.astype(mx.float32) - ref.astype(mx.float32))).item()
        t = bench(lambda: fa.decode_attention(q, k, v, backend="cuda"))
        gbs = 2 * B * 8 * S * 128 * 2 / (t * 1e3)
        r = dict(var, B=B, S=S, us=round(t, 1), mlx_us=round(t_mlx, 1), GBs=round(gbs), vs_mlx=round(t_mlx / t, 2), err=err)
        rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "tune.json"), "w"))
