"""End-to-end generation over fusedattend's quantized window cache against mlx_lm's caches.

    python -m fusedattend generate-bench [--model qwen3-4b|llama-3-8b|tiny] [--layers N]
        [--batch 1 4 8 16 32] [--context 2048 8192 32768] [--tokens 64] [--window 128]
        [--json F] [--plot F]

A model of random bfloat16 weights built from a real configuration (no download), B prompts of
`context` random tokens, prefilled in chunks (prefill_chunk), then `tokens` greedy steps queued as
mlx_lm's generate_step queues them, each arm once untimed (3 tokens) and then timed. Arms (each on
fresh caches):
- "bf16": mlx_lm's KVCache, its own attention;
- "mlx_lm 4-bit": mlx_lm's QuantizedKVCache, its own attention (reported with its error where it
  raises, as on MLX 0.32.4's CUDA backend);
- "dequantize": QuantizedWindowCache unpatched: its keys dequantized, then MLX's SDPA;
- "fused": QuantizedWindowCache under patch_mlx_lm: decode steps in windowed_decode_attention.
Before any time is reported, "dequantize" and "fused" must give the same greedy tokens for every
request, or part only at a near tie (partings): otherwise the run stops and says where they part
(exit status 1). An arm that raises (mlx_lm's 4-bit on CUDA, out of memory at a large B and
context) gets a row with its error, and the grid goes on. Random weights give flat
distributions, whose top two logits may lie a bfloat16 step apart: there the two arms' roundings
(MLX's SDPA over keys dequantized to bfloat16, against fusedattend's float32 sums) can pick
different tokens (seen on the tiny model: a gap of 0.0078 against a difference of 0.0166);
--dtype float32 makes such ties rare. So each step also records its top two logits, and a request
whose tokens part where both arms' top two lie within TIE_STEPS bfloat16 steps (the histories are
the same up to there) is reported as parted at a near tie, its later tokens not compared.

Reported a row: ms a step (the median of the decode steps, each from one token read to the
next), tokens/s (B over it), the steps' mean, time to first token (the prefill and the first
step), peak memory (mx.get_peak_memory over the arm) and the cache's bytes a token (its nbytes
over the tokens it holds). --error-steps N adds the attention outputs' error against a bf16
cache along N steps, with the window and without (every token 4-bit).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import mlx.core as mx

MODELS = {
    "qwen3-4b": ("qwen3", dict(model_type="qwen3", hidden_size=2560, num_hidden_layers=36, intermediate_size=9728,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                               vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                               tie_word_embeddings=True)),
    "llama-3-8b": ("llama", dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
                                 num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, vocab_size=128256,
                                 rope_theta=500000.0, tie_word_embeddings=False)),
    # For tests on a CPU: heads of D = 128 and a GQA group of 4, as the others, little else.
    "tiny": ("llama", dict(model_type="llama", hidden_size=512, num_hidden_layers=2, intermediate_size=512,
                           num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-5, vocab_size=512,
                           tie_word_embeddings=False)),
}
ARMS = ("bf16", "mlx_lm 4-bit", "dequantize", "fused")
PREFILL_CHUNK = 2048
# Tokens of one prefill chunk over the whole batch. Goal: a chunk's attention fits beside the
# cache where MLX's SDPA takes its unfused form (scores materialised, as on the CPU). Example:
# B = 32 at 8192 tokens in 2048-token chunks would be 32 x 32 heads x 2048 x 8192 scores, 34 GiB
# in bf16 a copy; in 256-token chunks, 4.3 GiB. Rule: mlx_lm's 2048 tokens a request, fewer so
# that the batch's chunk holds at most PREFILL_TOKENS (every arm the same chunks).
PREFILL_TOKENS = 8192
WARMUP_TOKENS = 3  # a cell's untimed run: its prompt and two queued steps
# A near tie: top two logits at most this many bfloat16 steps (2^-7 of the top's power of two)
# apart. Goal: tell rounding from a wrong kernel. Example: a top logit of 5.3 has steps of
# 2^2 * 2^-7 = 0.031, so a gap of 0.06 or less is a tie (each row reports its steps' median gap,
# to set against it). Rule: two steps, and a parting counts as a tie only when both
# arms' gaps are within them, at the first step where the request's tokens differ.
TIE_STEPS = 2
PER_TOKEN = ("tokens", "top_two")  # a run's results kept out of the rows


def build_model(name, layers=None, seed=0, dtype=mx.bfloat16):
    import importlib

    mx.random.seed(seed)  # the same weights every run

    module, config = MODELS[name]
    module = importlib.import_module(f"mlx_lm.models.{module}")
    config = dict(config, num_hidden_layers=layers or config["num_hidden_layers"])
    model = module.Model(module.ModelArgs(**config))
    model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


def caches_for(arm, model, window, bits=4, group_size=64):
    import fusedattend
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    if arm == "bf16":
        return [KVCache() for _ in model.layers]
    if arm == "mlx_lm 4-bit":
        return [QuantizedKVCache(group_size=group_size, bits=bits) for _ in model.layers]
    return fusedattend.make_prompt_cache(model, bits=bits, group_size=group_size, window=window)


def cache_bytes(arm, model, B, tokens, window, bits=4, group_size=64):
    """The bytes an arm's caches hold for B requests of `tokens` tokens (the arms' layouts, not
    measured): full-precision keys and values, or mx.quantize's codes, scales and biases, the
    window arms with their 2 x window full-precision rows a request."""
    a = model.args
    H_kv = a.num_key_value_heads
    D = getattr(a, "head_dim", None) or a.hidden_size // a.num_attention_heads
    size = next(iter(model.layers)).self_attn.k_proj.weight.dtype.size
    full = 2 * H_kv * D * size  # K and V of one token, one layer
    if arm == "bf16":
        per_request = full * tokens
    else:
        per_request = 2 * H_kv * (D * bits // 8 + 2 * (D // group_size) * size) * tokens
        if arm != "mlx_lm 4-bit":
            per_request += full * 2 * window
    return len(model.layers) * B * per_request


def device_memory():
    """The GPU's memory in bytes, or None (the CPU: no check)."""
    if mx.default_device() != mx.gpu:
        return None
    info = mx.device_info()
    return info.get("memory_size") or info.get("total_memory") or None


def too_big(arm, model, B, tokens, window, memory):
    """A row's error where the arm's caches and the weights would not fit in `memory` (bytes,
    None: never), else None. Goal: a 32k cell at B = 32 gets a row saying so at once, instead
    of minutes of prefill ending out of memory. Example: Qwen3-4B's bf16 caches at B = 32 over
    32800 tokens are 144 GiB, past an H200's 139. Rule: the caches' bytes (cache_bytes) plus the
    memory in use (the weights) within 90% of the device's; prefill temporaries not counted."""
    if memory is None:
        return None
    need = cache_bytes(arm, model, B, tokens, window) + mx.get_active_memory()
    if need <= 0.9 * memory:
        return None
    return f"skipped: needs {need / 2**30:.1f} GiB (caches and weights), the device has {memory / 2**30:.1f}"


def prefill_chunk(B):
    """Tokens a request in each prefill chunk of a batch of B (PREFILL_TOKENS)."""
    return max(1, min(PREFILL_CHUNK, PREFILL_TOKENS // B))


def generate(model, caches, prompts, tokens):
    """(greedy tokens (B, tokens) as lists, their steps' top two logits (B, tokens, 2) as lists,
    seconds to first token, each decode step's seconds from one token read to the next)."""
    start = time.perf_counter()
    chunk = prefill_chunk(prompts.shape[0])
    for i in range(0, prompts.shape[1] - 1, chunk):
        model(prompts[:, i:min(i + chunk, prompts.shape[1] - 1)], cache=caches)
        mx.eval([c.state for c in caches])

    def step(y):
        logits = model(y[:, None], cache=caches)[:, -1]
        return mx.argmax(logits, axis=-1), mx.topk(logits, 2, axis=-1)

    y, top = step(prompts[:, -1])
    mx.eval(y, top)
    first = time.perf_counter()
    ready = [first]  # when each token was read: token 0, then 1 ... tokens - 1
    out, tops = [y], [top]
    for i in range(1, tokens):  # as generate_step: the next step sent before this token is read
        next_y, top = step(y)
        mx.async_eval(next_y, top)
        mx.eval(y)
        if i > 1:  # token i - 1 (token 0 was read before the loop)
            ready.append(time.perf_counter())
        y = next_y
        out.append(y)
        tops.append(top)
    mx.eval(y, tops)
    ready.append(time.perf_counter())
    steps = [b - a for a, b in zip(ready, ready[1:])] if tokens > 1 else []
    return mx.stack(out, axis=1).tolist(), mx.stack(tops, axis=1).astype(mx.float32).tolist(), first - start, steps


def run_arm(arm, model, prompts, tokens, window):
    import fusedattend

    restore = fusedattend.patch_mlx_lm() if arm == "fused" else None
    mx.clear_cache()
    mx.reset_peak_memory()
    try:
        caches = caches_for(arm, model, window)
        out, tops, ttft, step_times = generate(model, caches, prompts, tokens)
    except Exception as err:  # mlx_lm's quantized attention on CUDA, out of memory
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}
    finally:
        if restore:
            restore()
    B = prompts.shape[0]
    held = B * (prompts.shape[1] + tokens - 1)
    gaps = sorted(max(t) - min(t) for request in tops for t in request)
    # The median step: a step that flushes the windows, or a pause of the host, moves it little.
    median = sorted(step_times)[len(step_times) // 2] if step_times else None
    return {"tokens": out, "top_two": tops, "median_top_gap": gaps[len(gaps) // 2],
            "tokens_per_s": B / median if median else None, "ms_per_step": median and 1e3 * median,
            "ms_per_step_mean": step_times and 1e3 * sum(step_times) / len(step_times) or None, "ttft_s": ttft,
            "peak_bytes": mx.get_peak_memory(), "kv_bytes_per_token": sum(c.nbytes for c in caches) / held}


def attention_error(model, context, steps, window, seed=0):
    """Each decode step's attention outputs, every layer, over a 4-bit cache against a bf16
    KVCache's, along one generation of `steps` tokens (the bf16 run's greedy tokens fed to all):
    {arm: [per step, the largest |difference| over the largest |bf16 output|, over the layers]}.
    "window": QuantizedWindowCache(window); "no window": mlx_lm's QuantizedKVCache, every token
    4-bit. All three patched, so that each decode step takes fusedattend's kernels."""
    import importlib

    import fusedattend
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    module = importlib.import_module(type(model).__module__)
    prompt = mx.random.randint(0, model.args.vocab_size, (1, context), key=mx.random.key(seed))
    makers = {"bf16": lambda: [KVCache() for _ in model.layers],
              "window": lambda: fusedattend.make_prompt_cache(model, window=window),
              "no window": lambda: [QuantizedKVCache(group_size=64, bits=4) for _ in model.layers]}
    outputs, fed = {}, None
    for arm, make in makers.items():
        restore = fusedattend.patch_mlx_lm()
        patched = module.scaled_dot_product_attention
        seen = []

        def recording(queries, *args, **kwargs):
            out = patched(queries, *args, **kwargs)
            if queries.shape[2] == 1:
                seen.append(out.astype(mx.float32))
            return out

        module.scaled_dot_product_attention = recording
        try:
            caches = make()
            model(prompt[:, :-1], cache=caches)
            y, tokens = prompt[:, -1], []
            for step in range(steps):
                logits = model(y[:, None], cache=caches)
                mx.eval(logits, seen[-len(model.layers):])
                tokens.append(mx.argmax(logits[:, -1], axis=-1))
                y = fed[step] if fed is not None else tokens[-1]
        finally:
            module.scaled_dot_product_attention = patched
            restore()
        fed = fed or tokens
        outputs[arm] = seen
    layers = len(model.layers)
    errors = {}
    for arm in ("window", "no window"):
        per_step = []
        for step in range(steps):
            worst = 0.0
            for layer in range(layers):
                want = outputs["bf16"][step * layers + layer]
                got = outputs[arm][step * layers + layer]
                worst = max(worst, (mx.abs(got - want).max() / mx.abs(want).max()).item())
            per_step.append(worst)
        errors[arm] = per_step
    return errors


def near_tie(top_two):
    """Whether a step's top two logits lie within TIE_STEPS bfloat16 steps (TIE_STEPS)."""
    hi, lo = max(top_two), min(top_two)
    if not math.isfinite(hi - lo):  # NaN or inf logits are never a tie
        return False
    step = 2.0 ** (math.floor(math.log2(abs(hi))) - 7) if hi else 2.0 ** -133
    return hi - lo <= TIE_STEPS * step


def partings(a, b):
    """Each request's first step where the arms' tokens differ, as (request, step, token of a,
    token of b, whether both arms' top two logits there are a near tie), in request order."""
    found = []
    for request, (x, y) in enumerate(zip(a["tokens"], b["tokens"])):
        for step, (s, t) in enumerate(zip(x, y)):
            if s != t:
                tie = near_tie(a["top_two"][request][step]) and near_tie(b["top_two"][request][step])
                found.append((request, step, s, t, tie))
                break
    return found


def _pair(result, request, step):
    return "/".join(f"{x:.4g}" for x in sorted(result["top_two"][request][step], reverse=True))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m fusedattend generate-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", choices=sorted(MODELS), default="qwen3-4b")
    p.add_argument("--layers", type=int, default=None, help="fewer layers than the model's (default: all)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    p.add_argument("--context", type=int, nargs="+", default=[2048, 8192, 32768])
    p.add_argument("--tokens", type=int, default=64, help="greedy tokens a request (default 64)")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    p.add_argument("--seed", type=int, default=0, help="of the weights and prompts")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16",
                   help="of the weights and the full-precision caches (default bfloat16)")
    p.add_argument("--error-steps", type=int, default=0,
                   help="also: the attention outputs' error against a bf16 cache over this many steps, "
                        "with and without the window (at the first context, B = 1)")
    args = p.parse_args(argv)
    for name in ("batch", "context"):
        if min(getattr(args, name)) < 1:
            p.error(f"--{name} must be positive")
    if args.tokens < 1 or args.window < 1 or (args.layers is not None and args.layers < 1):
        p.error("--tokens, --window and --layers must be positive")
    return args


def table(rows):
    lines = ["| B | context | arm | tokens/s | ms a step | TTFT s | peak MiB | KV bytes a token | parted at ties |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['context']} | {r['arm']} | {r['error']} | | | | | |")
            continue
        tps = "" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.1f}"
        ms = "" if r["ms_per_step"] is None else f"{r['ms_per_step']:.2f}"
        lines.append(f"| {r['batch']} | {r['context']} | {r['arm']} | {tps} | {ms} | {r['ttft_s']:.3f} | "
                     f"{r['peak_bytes'] / 2**20:.1f} | {r['kv_bytes_per_token']:.0f} | "
                     f"{len(r.get('parted_at_ties', ''))} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = sorted({r["context"] for r in rows})
    fig, axes = plt.subplots(1, len(contexts), figsize=(5 * len(contexts), 4), squeeze=False)
    for ax, context in zip(axes[0], contexts):
        for arm in ARMS:
            points = [(r["batch"], r["tokens_per_s"]) for r in rows if r["context"] == context and r["arm"] == arm
                      and r.get("tokens_per_s")]
            if points:
                ax.plot(*zip(*points), marker="o", label=arm)
        ax.set(title=f"context {context}", xlabel="B", ylabel="tokens/s", xscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def run_meta(argv):
    """What a results file keeps of the run (generate_results): the chip, device, versions, date
    and the command."""
    import datetime

    import mlx_lm

    from fusedattend.chip import chip_id

    device = mx.default_device()
    name = mx.device_info().get("device_name") if device == mx.gpu else None
    return {"chip": chip_id(), "device": name or str(device), "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python -m fusedattend generate-bench", *argv])}


def save(args, meta, rows, errors, complete):
    with open(args.json, "w") as f:
        json.dump({**meta, "model": args.model, "layers": args.layers, "tokens": args.tokens, "window": args.window,
                   "complete": complete, "rows": rows, "attention_error": errors}, f, indent=1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    meta = run_meta(argv) if args.json else None
    model = build_model(args.model, args.layers, args.seed, getattr(mx, args.dtype))
    vocab = model.args.vocab_size
    cells = [(B, context) for context in args.context for B in args.batch]
    rows = []
    memory = device_memory()
    for n, (B, context) in enumerate(cells):
        prompts = mx.random.randint(0, vocab, (B, context), key=mx.random.key(args.seed + n))
        results = {}
        for arm in args.arms:
            print(f"\r[{n + 1}/{len(cells)}] B={B} context={context} {arm:<12}", end="", file=sys.stderr, flush=True)
            # Untimed first: the kernels this cell's shapes need get compiled (on the GPU seconds,
            # which the first arm to run would otherwise count as its time to first token).
            skip = too_big(arm, model, B, context + args.tokens, args.window, memory)
            if skip:
                results[arm] = {"error": skip}
                continue
            warm = run_arm(arm, model, prompts, min(WARMUP_TOKENS, args.tokens), args.window)
            results[arm] = warm if "error" in warm else run_arm(arm, model, prompts, args.tokens, args.window)
        if "dequantize" in results and "fused" in results:
            a, b = results["dequantize"], results["fused"]
            for arm in ("dequantize", "fused"):
                if "error" in results[arm]:
                    print(f"\nB={B} context={context}, {arm}: {results[arm]['error']}", file=sys.stderr)
            parted = [] if "error" in a or "error" in b else partings(a, b)
            for request, step, s, t, tie in parted:
                print(f"\nB={B} context={context}: the dequantize and fused arms part at request {request}, "
                      f"step {step}: token {s} against {t}, " + ("at a near tie" if tie else "not at a tie") +
                      f" (top two: {_pair(a, request, step)} and {_pair(b, request, step)})", file=sys.stderr)
            if not all(tie for *_, tie in parted):
                print("No times reported.", file=sys.stderr)
                return 1
            for r in (a, b):
                r["parted_at_ties"] = [[request, step] for request, step, *_ in parted]
        rows += [dict(batch=B, context=context, arm=arm, **{k: v for k, v in r.items() if k not in PER_TOKEN})
                 for arm, r in results.items()]
        if args.json:  # after every cell: a run cut short keeps the rows it finished
            save(args, meta, rows, None, complete=False)
    print(file=sys.stderr)
    print(table(rows))
    errors = None
    if args.error_steps:
        errors = attention_error(model, args.context[0], args.error_steps, args.window, args.seed)
        for arm, per_step in errors.items():
            print(f"attention error against bf16, {arm}: first step {per_step[0]:.3g}, last {per_step[-1]:.3g}, "
                  f"largest {max(per_step):.3g}, mean {sum(per_step) / len(per_step):.3g} "
                  f"({len(per_step)} steps, context {args.context[0]})")
    if args.json:
        save(args, meta, rows, errors, complete=True)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
