"""Where a decode step over mlx_lm's 4-bit QuantizedKVCache spends its time (call 204).

tests/perf/test_mlx_lm_perf.py's model (Llama-3-8B's attention, 4 layers, small MLP and
vocabulary), B = 1 and 8, S = 8192, STEPS steps a round queued and evaluated once, the median of
ROUNDS rounds, µs a step. Each variant on fresh caches:
  mlx_lm          mlx_lm's own attention (bf16 KVCache only: its 4-bit path raises on CUDA)
  patched         fusedattend.patch_mlx_lm()
  no attention    each layer's attention replaced by its queries (the cache is still updated)
  dequant+sdpa    the 4-bit cache dequantized, then MLX's SDPA
  one at a time   patched, each step evaluated before the next is built: "build + evaluate"
(BATCHES="1" for B = 1 alone),
and, apart from any model, a layer's cache update alone (update_and_fetch of one token, 4 caches,
STEPS steps queued) and a layer's attention alone on the cache views it returns.
"""

import json
import os
import statistics
import sys
import time

import mlx.core as mx
from mlx_lm.models import llama

import fusedattend as fa
from fusedattend import mlx_lm_attention

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../ci/gpu"))
import mlx_lm_decode as d  # noqa: E402

LAYERS, STEPS, ROUNDS, S = 4, 8, 11, 8192
if os.environ.get("LAYERS"):  # ci/gpu/mlx_lm_decode.py's whole model of that many layers (kernels.py)
    model = d.build_model(int(os.environ["LAYERS"]))
else:
    args = llama.ModelArgs(model_type="llama", hidden_size=4096, num_hidden_layers=LAYERS, intermediate_size=1024,
                           num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, vocab_size=1024)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())


def queued_round(caches, B):
    y = mx.zeros((B,), dtype=mx.int32)
    for _ in range(STEPS):
        y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
    mx.eval(y)
    for c in caches:
        c.trim(STEPS)


def one_at_a_time(caches, B):
    y = mx.zeros((B,), dtype=mx.int32)
    build = evaluate = 0.0
    for _ in range(STEPS):
        t0 = time.perf_counter()
        y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
        t1 = time.perf_counter()
        mx.eval(y)
        build, evaluate = build + t1 - t0, evaluate + time.perf_counter() - t1
    for c in caches:
        c.trim(STEPS)
    return build, evaluate


def us_a_step(fn):
    fn()
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times) / STEPS


def with_patch(patch, fn):
    restore = patch()
    try:
        return fn()
    finally:
        restore()


def skip():
    return d.skip_attention()


def dequant_sdpa():
    original = llama.scaled_dot_product_attention

    def attend(q, k, v, cache, scale, mask, sinks=None):
        if hasattr(cache, "bits"):
            k, v = (fa.dequantize_kv(*x, bits=cache.bits, group_size=cache.group_size) for x in (k, v))
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)

    llama.scaled_dot_product_attention = attend

    def restore():
        llama.scaled_dot_product_attention = original

    return restore


rows = []


def row(B, cache, variant, value):
    rows.append(dict(B=B, cache=cache, variant=variant, us=value))
    shown = f"{value:.1f}" if isinstance(value, float) else value
    print(f"B={B} {cache:<5} {variant:<16} {shown}", flush=True)


for B in [int(b) for b in os.environ.get("BATCHES", "1 8").split()]:
    for quant in (False, True):
        name = "q4" if quant else "bf16"
        fresh = lambda: d.filled_caches(model, B, S, quant)  # noqa: E731
        variants = {"patched": fa.patch_mlx_lm, "no attention": skip, "dequant+sdpa": dequant_sdpa}
        if not quant:
            variants = {"mlx_lm": None, **variants}
        for variant, patch in variants.items():
            caches = fresh()
            run = lambda: queued_round(caches, B)  # noqa: E731
            row(B, name, variant, us_a_step(run) if patch is None else with_patch(patch, lambda: us_a_step(run)))
            del caches
            mx.clear_cache()
        caches = fresh()
        parts = with_patch(fa.patch_mlx_lm, lambda: [one_at_a_time(caches, B) for _ in range(4)][1:])
        b, e = (statistics.median(p[i] for p in parts) for i in (0, 1))
        row(B, name, "one at a time", f"{1e6 * b / STEPS:.1f} + {1e6 * e / STEPS:.1f}")
        # a layer's cache update alone, and the attention alone on what it returns
        shape = (B, 8, 1, 128)
        k1, v1 = mx.random.normal(shape).astype(mx.bfloat16), mx.random.normal(shape).astype(mx.bfloat16)
        q1 = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
        mx.eval(k1, v1, q1)

        def updates():
            outs = [c.update_and_fetch(k1, v1) for _ in range(STEPS) for c in caches]
            mx.eval(outs)
            for c in caches:
                c.trim(STEPS)

        row(B, name, "updates alone", us_a_step(updates))
        views = [c.update_and_fetch(k1, v1) for c in caches]
        mx.eval(views)

        def attention():
            outs = [mlx_lm_attention.scaled_dot_product_attention(q1, kv[0], kv[1], c, 128**-0.5, None)
                    for _ in range(STEPS) for kv, c in zip(views, caches)]
            mx.eval(outs)

        row(B, name, "attention alone", us_a_step(attention))
        del caches, views
        mx.clear_cache()

json.dump(dict(mlx=mx.__version__, device=mx.device_info().get("device_name"), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), "steps.json"), "w"), indent=1)
