"""Where a B = 1 decode step's graph building goes in the Llama-3-8B-shaped model: the time spent
inside the attention function, mlx_lm's against patched, and a profile of a patched step's build.

    python3 docs/h200/mlx-lm-batch/attention_build_cost.py [context] [--quantized] [--layers=32]

Each step is built (timed: the whole model call, and the attention calls inside it), then
evaluated; 4 warm-up steps, then 16, rounds alternating. µs a layer are the medians of the rounds.
"""
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ci" / "gpu"))

import mlx.core as mx  # noqa: E402
from mlx_lm.models import llama  # noqa: E402
from mlx_lm_decode import build_model, filled_caches  # noqa: E402

import fusedattend  # noqa: E402

LAYERS = int(next((a[9:] for a in sys.argv if a.startswith("--layers=")), 32))
context = int(next((a for a in sys.argv[1:] if a.isdigit()), 2048))
quantized = "--quantized" in sys.argv
model = build_model(LAYERS)
caches = filled_caches(model, 1, context, quantized)
spent = [0.0]


def timed_attention(real):
    def attention(*args, **kwargs):
        start = time.perf_counter()
        out = real(*args, **kwargs)
        spent[0] += time.perf_counter() - start
        return out
    return attention


def steps(n, profile=None):
    """(build ms a token, attention µs a layer in the build, evaluate ms a token) over n steps."""
    y = mx.zeros((1,), dtype=mx.int32)
    build = evaluate = 0.0
    spent[0] = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        if profile:
            profile.enable()
        next_y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
        if profile:
            profile.disable()
        t1 = time.perf_counter()
        mx.eval(next_y)
        build, evaluate = build + t1 - t0, evaluate + time.perf_counter() - t1
        y = next_y
    for cache in caches:
        cache.trim(n)
    return 1e3 * build / n, 1e6 * spent[0] / (n * LAYERS), 1e3 * evaluate / n


rows = {"mlx_lm": [], "fusedattend": []}
if quantized:
    del rows["mlx_lm"]  # its quantized attention raises on MLX 0.32.4's CUDA backend past 2048 keys
for _ in range(3):
    for impl in rows:
        restore = fusedattend.patch_mlx_lm() if impl == "fusedattend" else None
        real = llama.scaled_dot_product_attention
        llama.scaled_dot_product_attention = timed_attention(real)
        try:
            steps(4)
            rows[impl].append(steps(16))
        finally:
            llama.scaled_dot_product_attention = real
            if restore:
                restore()
kind = "4-bit QuantizedKVCache" if quantized else "bf16 KVCache"
print(f"B = 1, {context} keys, {kind}: build ms a token / attention µs a layer in it / evaluate ms a token")
for impl, r in rows.items():
    print(f"  {impl}: " + " | ".join(f"{statistics.median(x[i] for x in r):.3f}" for i in range(3))
          + "   rounds: " + "; ".join(" / ".join(f"{v:.3f}" for v in x) for x in r), flush=True)

restore = fusedattend.patch_mlx_lm()
profile = cProfile.Profile()
steps(4)
steps(8, profile)
restore()
pstats.Stats(profile).sort_stats("tottime").print_stats(25)
