"""The kernels of one queued round of steps.py's model, as CUPTI records them (call 205).

torch.profiler's CUDA activity is CUPTI's, which records every kernel and copy of the process,
MLX's included. B = 1, S = 8192: a warm-up round, then one profiled round each of: bf16 KVCache
patched, 4-bit QuantizedKVCache patched (queued), the same one step at a time, and the 4-bit
cache's updates alone (no model). Prints each one's kernels by total GPU time, and its wall time.
B=8 profiles another batch; ROUND=generate takes the model's rounds as mlx_lm's generate_step
does (greedy_steps), not queued (call 209); LAYERS=32 profiles ci/gpu/mlx_lm_decode.py's whole
Llama-3-8B-shaped model of that many layers instead of steps.py's 4-layer one; PEERS=1 profiles a
round of mlx_lm's own attention over a bf16 KVCache first (call 211).
"""

import os
import sys
import time

import mlx.core as mx
import torch
from torch.profiler import ProfilerActivity, profile

sys.argv = sys.argv[:1]
here = os.path.dirname(__file__)
src = open(os.path.join(here, "steps.py")).read().split("rows = []")[0]  # the model and helpers only
exec(compile(src, "steps.py", "exec"))

torch.zeros(1, device="cuda")  # CUDA context for torch before profiling
B = int(os.environ.get("B", "1"))
ROUND = os.environ.get("ROUND", "queued")


def model_round(caches):
    if ROUND == "generate":
        d.greedy_steps(model, caches, B, STEPS)
        for c in caches:
            c.trim(STEPS)
    else:
        queued_round(caches, B)


out = os.environ.get("OUT", ".")


def profiled(label, caches, fn):
    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    gpu = sum(e.device_time_total for e in averages)
    print(f"\n## {label}: wall {1e6 * wall:.0f} us for {STEPS} steps, kernels {gpu:.0f} us", flush=True)
    print(averages.table(sort_by="device_time_total", row_limit=25, max_name_column_width=90), flush=True)
    graphs = {e.key: (e.count, e.cpu_time_total) for e in averages if e.key.startswith("cudaGraph")}
    print("graph calls (count, host us): " + ", ".join(f"{k} {n} {t:.0f}" for k, (n, t) in sorted(graphs.items())),
          flush=True)
    prof.export_chrome_trace(os.path.join(out, label.replace(" ", "_") + ".json"))


print(f"B = {B}, rounds {ROUND}", flush=True)
if os.environ.get("PEERS"):
    caches = d.filled_caches(model, B, S, False)
    profiled("bf16 mlx_lm", caches, lambda: model_round(caches))
    del caches
    mx.clear_cache()
for quant, label in ((False, "bf16 patched"), (True, "q4 patched")):
    caches = d.filled_caches(model, B, S, quant)
    restore = fa.patch_mlx_lm()
    profiled(label, caches, lambda: model_round(caches))
    if quant:
        profiled("q4 one at a time", caches, lambda: one_at_a_time(caches, B))
    restore()
    if quant:
        k1 = mx.random.normal((B, 8, 1, 128)).astype(mx.bfloat16)
        mx.eval(k1)

        def updates():
            outs = [c.update_and_fetch(k1, k1) for _ in range(STEPS) for c in caches]
            mx.eval(outs)
            for c in caches:
                c.trim(STEPS)

        profiled("q4 updates alone", caches, updates)

        def quantize_alone():
            mx.eval([mx.quantize(k1, group_size=64, bits=4) for _ in range(2 * STEPS * len(caches))])

        profiled("q4 quantize alone", caches, quantize_alone)
    del caches
    mx.clear_cache()
