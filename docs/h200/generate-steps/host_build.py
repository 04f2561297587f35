"""Host time to build one 4-bit decode call at S = 64 through the reference backend (lazy: nothing
is evaluated), which makes the same argument checks as the GPU path. The package is imported from
the folder given, so two versions compare side by side (2026-12-05, on the CPU machine):

    git worktree add /tmp/old 646f822
    python docs/h200/generate-steps/host_build.py /tmp/old   # 77.9, 79.5 us
    python docs/h200/generate-steps/host_build.py .          # 79.7, 79.8 us
"""
import sys, time, statistics
sys.path.insert(0, sys.argv[1])
import mlx.core as mx
import fusedattend as fa
print(fa.__file__)
B, S = 1, 64
q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
k = mx.random.normal((B, 8, 512, 128)).astype(mx.bfloat16)
kq = fa.quantize_kv(k, bits=4, group_size=64); vq = fa.quantize_kv(k, bits=4, group_size=64)
mx.eval(q, kq, vq)
views = [tuple(x[..., :S, :] for x in kq), tuple(x[..., :S, :] for x in vq)]
def call(b):
    return fa.quantized_decode_attention(q, *views, scale=128**-0.5, bits=4, group_size=64, backend=b)
for b in ("reference",):
    for _ in range(50): call(b)
    ts=[]
    for _ in range(7):
        t0=time.perf_counter()
        for _ in range(200): call(b)
        ts.append((time.perf_counter()-t0)/200*1e6)
    print(b, f"{statistics.median(ts):.1f} us to build a call")
