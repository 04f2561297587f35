"""Decode speed of an mlx_lm model, with and without `fusedattend.patch_mlx_lm()`.

    python -m fusedattend.benchmarks.mlx_lm_decode [--layers 32] [--batch 1 8] [--context 2048 8192 32768] [--padded] [--json F]

A Llama-3-8B-shaped model (hidden 4096, 32 query heads over 8 kv heads of D = 128, MLP 14336,
vocabulary 128256) of random bfloat16 weights, its caches filled with `context` random keys and
values, then greedy decoding as mlx_lm's generate loop does it (each step queued with
mx.async_eval before the previous token is read). Per token: milliseconds of the whole model step,
for mlx_lm's own attention ("mlx_lm": mx.fast.scaled_dot_product_attention over a KVCache, its
quantized_matmul path over a 4-bit QuantizedKVCache), for the patched model ("fusedattend"), and
with attention skipped (each layer's queries handed on as its output: the rest of the step).
Rounds take the three in turn on the same caches (trimmed back after each round); the median
round counts. An implementation that raises is reported with its error.

--padded: the batch as mlx_lm's BatchGenerator holds it, a BatchKVCache of left-padded requests
(mlx_lm's merge of one KVCache a request), request i holding context - i * context // (2 B) keys
(a quarter of the cache is padding at B = 8); bf16 only (mlx_lm has no quantized batch cache).
mlx_lm masks the padding with a boolean array; "fusedattend" passes it to the kernels as key
ranges, and "fusedattend, mask" is the patched model with the mask passed on instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache

import fusedattend
from fusedattend import mlx_lm_attention

LLAMA_3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                  num_key_value_heads=8, rms_norm_eps=1e-5, vocab_size=128256, rope_theta=500000.0,
                  tie_word_embeddings=False)
BITS, GROUP_SIZE = 4, 64


def build_model(layers):
    model = llama.Model(llama.ModelArgs(num_hidden_layers=layers, **LLAMA_3_8B))
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    return model


def filled_caches(model, batch, context, quantized):
    caches = []
    for layer in model.layers:
        attn = layer.self_attn
        shape = (batch, attn.n_kv_heads, context, attn.head_dim)
        cache = QuantizedKVCache(group_size=GROUP_SIZE, bits=BITS) if quantized else KVCache()
        cache.update_and_fetch(mx.random.normal(shape).astype(mx.bfloat16),
                               mx.random.normal(shape).astype(mx.bfloat16))
        mx.eval(cache.state[:2])
        caches.append(cache)
    return caches


def padded_lengths(batch, context):
    """The keys each request of a --padded batch holds (module docstring)."""
    return [context - i * context // (2 * batch) for i in range(batch)]


def padded_caches(model, batch, context):
    """Each layer's BatchKVCache of `batch` left-padded requests (module docstring, --padded)."""
    caches = []
    for layer in model.layers:
        attn = layer.self_attn
        requests = []
        for n in padded_lengths(batch, context):
            shape = (1, attn.n_kv_heads, n, attn.head_dim)
            request = KVCache()
            request.update_and_fetch(mx.random.normal(shape).astype(mx.bfloat16),
                                     mx.random.normal(shape).astype(mx.bfloat16))
            requests.append(request)
        cache = BatchKVCache.merge(requests)
        mx.eval(cache.keys, cache.values, cache.left_padding, cache.offset)
        caches.append(cache)
    return caches


def patch_passing_masks():
    """patch_mlx_lm with a BatchKVCache's padding passed on as its mask, not as key ranges."""
    restore = fusedattend.patch_mlx_lm()
    noted = mlx_lm_attention.padding_key_ranges
    mlx_lm_attention.padding_key_ranges = lambda mask, keys: None

    def undo():
        mlx_lm_attention.padding_key_ranges = noted
        restore()

    return undo


def greedy_steps(model, caches, batch, steps):
    """`steps` greedy tokens as mlx_lm's generate_step queues them: each step built and sent
    (mx.async_eval) before the token of the step before is read (mx.eval); the last token."""
    if steps < 1:
        return None

    def step(tokens):
        return mx.argmax(model(tokens[:, None], cache=caches)[:, -1], axis=-1)

    y = step(mx.zeros((batch,), dtype=mx.int32))
    mx.async_eval(y)
    for _ in range(steps - 1):
        next_y = step(y)
        mx.async_eval(next_y)
        mx.eval(y)  # the token a server would hand out now
        y = next_y
    mx.eval(y)
    return y


def ms_per_token(model, caches, batch, steps, warmup):
    """Greedy decode of warmup + steps tokens (greedy_steps), the last `steps` timed; ms a token."""
    greedy_steps(model, caches, batch, warmup)
    start = time.perf_counter()
    greedy_steps(model, caches, batch, steps)
    elapsed = time.perf_counter() - start
    for cache in caches:
        cache.trim(warmup + steps)
    return 1e3 * elapsed / steps


def step_parts(model, caches, batch, steps, warmup):
    """Each step built, then evaluated, one after the other (no overlap): ms a token of building
    the step's graph (host) and of evaluating it (MLX's encoding of each op, host, and the GPU's
    run, which overlap)."""
    y = mx.zeros((batch,), dtype=mx.int32)
    build = evaluate = 0.0
    for n in range(warmup + steps):
        t0 = time.perf_counter()
        next_y = mx.argmax(model(y[:, None], cache=caches)[:, -1], axis=-1)
        t1 = time.perf_counter()
        mx.eval(next_y)
        t2 = time.perf_counter()
        if n >= warmup:
            build, evaluate = build + t1 - t0, evaluate + t2 - t1
        y = next_y
    for cache in caches:
        cache.trim(warmup + steps)
    return f"{1e3 * build / steps:.2f} + {1e3 * evaluate / steps:.2f}"


def skip_attention():
    """Each llama layer's attention replaced by its queries; returns the undo."""
    original = llama.scaled_dot_product_attention
    llama.scaled_dot_product_attention = lambda queries, *args, **kwargs: queries

    def restore():
        llama.scaled_dot_product_attention = original

    return restore


def timed(model, make_caches, batch, steps, warmup, rounds, measure=None, padded=False, every_round=None):
    """{impl: median ms a token, or the error it raised}, the implementations taking turns.
    every_round, a dict, gets {impl: each round's ms a token}."""
    patches = {"mlx_lm": None, "fusedattend": fusedattend.patch_mlx_lm, "no attention": skip_attention}
    if padded:
        patches["fusedattend, mask"] = patch_passing_masks
    times = {impl: [] for impl in patches}
    errors = {}
    caches = make_caches()
    for _ in range(rounds):
        for impl in times:
            if impl in errors:
                continue
            restore = patches[impl]() if patches[impl] else None
            try:
                times[impl].append((measure or ms_per_token)(model, caches, batch, steps, warmup))
            except Exception as err:  # mlx_lm's quantized path raises on CUDA past 2048 keys
                errors[impl] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
                caches = make_caches()  # the failed step's lazy arrays stay in the old ones
            finally:
                if restore:
                    restore()
    if measure:
        return {impl: errors.get(impl) or " / ".join(t) for impl, t in times.items()}
    if every_round is not None:
        every_round.update((impl, t) for impl, t in times.items() if impl not in errors)
    return {impl: errors.get(impl) or statistics.median(t) for impl, t in times.items()}


def with_range(median, rounds):
    """A table cell: the median ms a token and, over several rounds, their range, as
    "9.35 (9.21-9.60)"; an error or step_parts' text as it is. The range shows when one run's
    rounds disagree (a 4-bit row's median moved from 8.0 to 18.3 between runs on an H100)."""
    if not isinstance(median, float):
        return median
    if not rounds or len(rounds) < 2:
        return f"{median:.2f}"
    return f"{median:.2f} ({min(rounds):.2f}-{max(rounds):.2f})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--context", type=int, nargs="+", default=[2048, 8192, 32768])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", action="store_true",
                        help="time each step's graph building and its evaluation apart, unpipelined "
                             "(ms a token: build + evaluate, each round)")
    parser.add_argument("--padded", action="store_true",
                        help="left-padded requests in a BatchKVCache, bf16 (module docstring)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    model = build_model(args.layers)
    print(f"# model: Llama-3-8B shape, {args.layers} layers, bfloat16, built in {time.perf_counter() - t0:.1f} s; "
          f"mlx {mx.__version__}, device {mx.default_device()}", flush=True)
    rows = []
    masked = " | fusedattend, mask" if args.padded else ""
    print(f"| B | context | cache | mlx_lm ms/token | fusedattend ms/token | mlx_lm / fusedattend | no attention"
          f"{masked} |", flush=True)
    print("|---|---|---|---|---|---|---|" + "---|" * bool(masked), flush=True)
    for batch in args.batch:
        for context in args.context:
            for quantized in (False,) if args.padded else (False, True):
                if args.padded:
                    make, kind = (lambda: padded_caches(model, batch, context)), "bf16 BatchKVCache, left-padded"
                else:
                    make = lambda: filled_caches(model, batch, context, quantized)  # noqa: E731
                    kind = f"{BITS}-bit QuantizedKVCache" if quantized else "bf16 KVCache"
                every_round = {}
                result = timed(model, make, batch, args.steps, args.warmup, args.rounds,
                               step_parts if args.parts else None, padded=args.padded, every_round=every_round)
                mx.clear_cache()
                rows.append(dict(B=batch, context=context, cache=kind, **result, rounds=every_round))
                theirs, ours = result["mlx_lm"], result["fusedattend"]
                ratio = f"{theirs / ours:.2f}x" if all(isinstance(x, float) for x in (theirs, ours)) else "-"
                cell = lambda impl: with_range(result[impl], every_round.get(impl))  # noqa: E731
                extra = f" | {cell('fusedattend, mask')}" if masked else ""
                print(f"| {batch} | {context} | {kind} | {cell('mlx_lm')} | {cell('fusedattend')} | {ratio} | "
                      f"{cell('no attention')}{extra} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(mlx=mx.__version__, layers=args.layers, steps=args.steps, rounds=args.rounds,
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
