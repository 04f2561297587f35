"""Decode attention over a left-padded batch: key ranges against the equivalent boolean mask.

    python3 docs/h200/mlx-lm-batch/ranges_vs_mask.py B S

bf16, H_q = 32, H_kv = 8, D = 128, L = 1; request i holds S - i * S // (2 B) keys at the end of
its row (ci/gpu/mlx_lm_decode.py --padded's batch). µs a call, 20 calls queued an evaluation,
median of 15; implementations in turn: ours with key_ranges, ours with the mask, ours over all
S keys (no padding), MLX's SDPA with the mask.
"""
import statistics
import sys
import time

import mlx.core as mx

import fusedattend as fa

B, S = (int(x) for x in sys.argv[1:3])
q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
k, v = (mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16) for _ in range(2))
pad = [i * S // (2 * B) for i in range(B)]
ranges = mx.array([[p, S - p] for p in pad], dtype=mx.int32)
mask = (mx.arange(S)[None, :] >= mx.array(pad)[:, None]).reshape(B, 1, 1, S)
mx.eval(q, k, v, ranges, mask)
impls = {
    "key_ranges": lambda: fa.decode_attention(q, k, v, key_ranges=ranges),
    "mask": lambda: fa.decode_attention(q, k, v, mask=mask),
    "all keys": lambda: fa.decode_attention(q, k, v),
    "mx.fast.sdpa, mask": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128**-0.5, mask=mask),
}
times = {name: [] for name in impls}
for _ in range(16):
    for name, fn in impls.items():
        start = time.perf_counter()
        mx.eval([fn() for _ in range(20)])
        times[name].append((time.perf_counter() - start) / 20 * 1e6)
print(f"B = {B}, S = {S}, padding {sum(pad) / (B * S):.0%}: " + ", ".join(
    f"{name} {statistics.median(t[1:]):.1f} µs" for name, t in times.items()), flush=True)
