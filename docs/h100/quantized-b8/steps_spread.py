"""Every step of the 32-layer model's patched decode, timed, with Python's garbage collections.

ci/gpu/mlx_lm_decode.py reports the median of a few rounds; at B = 8 over a 4-bit cache that
median moved from 7.97 to 18.33 ms a token between runs of the same code (calls 208-213), where
the other rows moved by a few percent. This takes the steps as its `greedy_steps` does (each
built and sent with mx.async_eval before the token of the step before is read) and keeps, for
every step: the host time to build and send it, and the time between two tokens read. Rounds
alternate a bf16 KVCache and a 4-bit QuantizedKVCache, both filled with CONTEXT keys, under
fusedattend.patch_mlx_lm(). gc.callbacks time each garbage collection of the timed steps.

    B=8 LAYERS=32 ROUNDS=8 python3 docs/h100/quantized-b8/steps_spread.py [out.json]
"""

import gc
import json
import os
import statistics
import sys
import time

import mlx.core as mx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../ci/gpu"))
import mlx_lm_decode as d  # noqa: E402

import fusedattend as fa  # noqa: E402

B, LAYERS, ROUNDS = (int(os.environ.get(k, v)) for k, v in (("B", 8), ("LAYERS", 32), ("ROUNDS", 8)))
CONTEXT, STEPS, WARMUP = int(os.environ.get("CONTEXT", 8192)), 16, 4

collections = []  # (generation, seconds) of each collection while `collecting`
collecting = [False, 0.0]


def on_gc(phase, info):
    if not collecting[0]:
        return
    if phase == "start":
        collecting[1] = time.perf_counter()
    else:
        collections.append((info["generation"], time.perf_counter() - collecting[1]))


gc.callbacks.append(on_gc)


def timed_steps(model, caches, steps):
    """greedy_steps' loop with times: (ms to build and send each step, ms between tokens read)."""
    build, tokens = [], []

    def step(y):
        t0 = time.perf_counter()
        y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
        mx.async_eval(y)
        build.append(1e3 * (time.perf_counter() - t0))
        return y

    last = time.perf_counter()
    y = step(mx.zeros((B,), dtype=mx.int32))
    for n in range(steps):
        next_y = step(y) if n < steps - 1 else None
        mx.eval(y)
        now = time.perf_counter()
        tokens.append(1e3 * (now - last))
        last, y = now, next_y
    return build, tokens


def main():
    model = d.build_model(LAYERS)
    caches = {"bf16": d.filled_caches(model, B, CONTEXT, False), "q4": d.filled_caches(model, B, CONTEXT, True)}
    restore = fa.patch_mlx_lm()
    rows = []
    try:
        for r in range(ROUNDS):
            for kind, cache in caches.items():
                timed_steps(model, cache, WARMUP)
                collections.clear()
                collecting[0] = True
                build, tokens = timed_steps(model, cache, STEPS)
                collecting[0] = False
                for c in cache:
                    c.trim(WARMUP + STEPS)
                gcs = list(collections)
                rows.append(dict(round=r, cache=kind, build_ms=build, token_ms=tokens, gc=gcs))
                print(f"round {r} {kind:4s}: token ms median {statistics.median(tokens):6.2f} "
                      f"max {max(tokens):6.2f} mean {statistics.mean(tokens):6.2f}; build ms median "
                      f"{statistics.median(build):5.2f} max {max(build):6.2f}; gc {len(gcs)} "
                      f"({sum(t for _, t in gcs) * 1e3:.2f} ms, generations {sorted({g for g, _ in gcs})})",
                      flush=True)
    finally:
        restore()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(dict(mlx=mx.__version__, B=B, layers=LAYERS, context=CONTEXT, steps=STEPS, rows=rows), f)


if __name__ == "__main__":
    main()
