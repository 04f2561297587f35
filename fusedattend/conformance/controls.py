"""Negative controls: deliberately broken decode-attention kernels, and the correct one they break.

    python -m pytest --pyargs fusedattend.conformance --fa-kernel fusedattend.conformance.controls:gqa_mod

Each is online-softmax attention over 32-key blocks in float32 MLX ops, written from scratch
(it shares no code with fusedattend's backends or the oracle), in the fusedattend convention
(`f(q, k, v, *, scale, mask, key_ranges=None)`, a layer axis optional), which the sdpa
convention's calls also fit. `correct` must pass every property; each other one has one bug,
and CONTROLS says which properties must catch it and which it must pass
(tests/unit/test_conformance_controls.py checks both).
"""

from __future__ import annotations

import math

BLOCK = 32

# name: (convention, what is broken, properties it must fail, properties it must pass)
_ALL = ("parity", "batch_invariance", "slice_invariance", "masked_garbage", "gqa", "determinism",
        "mask_forms", "fully_masked_row", "masked_nan_values", "partly_hidden_nan_values")
CONTROLS = {
    "correct": ("sdpa", "nothing", (), _ALL),
    "split_by_batch": ("sdpa", "the keys are split in two halves when B > 1, in 32-key blocks when B = 1",
                       ("batch_invariance",), ("parity", "slice_invariance", "masked_garbage", "gqa", "determinism")),
    "gqa_mod": ("sdpa", "query head h reads kv head h % H_kv, not h // (H_q / H_kv)",
                ("gqa", "parity"), ("batch_invariance", "slice_invariance", "determinism")),
    "mask_after_exp": ("sdpa", "masking multiplies the weights by the mask after the exponent",
                       ("masked_garbage",), ("batch_invariance", "slice_invariance", "gqa", "determinism")),
    "no_rescale": ("sdpa", "the accumulator is not rescaled when a block raises the running max",
                   ("parity",), ("batch_invariance", "slice_invariance", "masked_garbage", "determinism")),
    "drop_last_block": ("sdpa", "the last key block is dropped when there are several",
                        ("parity",), ("batch_invariance", "slice_invariance", "masked_garbage", "determinism")),
    "swapped_strides": ("fusedattend", "with a layer axis, K/V of (layer, request) are read with the layer "
                        "and request strides swapped", ("layer_invariance",),
                        ("slice_invariance", "gqa", "determinism")),
}


def _visible(q5, S, mask, key_ranges):
    """Boolean (NL|1, B, H_q|1, L, S) mx array, or None when every key is visible."""
    import mlx.core as mx

    NL, B, H_q, L, D = q5.shape
    vis = None
    end = S
    j = mx.arange(S)
    if key_ranges is not None:
        start = key_ranges[:, 0].reshape(1, B, 1, 1, 1)
        end = start + key_ranges[:, 1].reshape(1, B, 1, 1, 1)
        vis = (j >= start) & (j < end)
    if isinstance(mask, str):
        causal = j <= (end - L + mx.arange(L).reshape(L, 1))
        vis = causal if vis is None else vis & causal
    elif mask is not None:
        m = mask if mask.dtype == mx.bool_ else mask != -math.inf
        m = m.reshape((1,) * (5 - m.ndim) + m.shape)
        vis = m if vis is None else vis & m
    return None if vis is None else mx.broadcast_to(vis, (NL, B, H_q, L, S))


def _swap_layer_request(x):
    """x (NL, B, …) read as a kernel would that swapped the two strides: element (l, b) is
    taken from flat position (l + b * B) mod NL·B instead of l * B + b."""
    import mlx.core as mx

    NL, B = x.shape[:2]
    flat = x.reshape((NL * B,) + x.shape[2:])
    idx = mx.array([(l + b * B) % (NL * B) for l in range(NL) for b in range(B)])
    return flat[idx].reshape(x.shape)


def _attend(q, k, v, scale, mask, key_ranges, bug):
    import mlx.core as mx

    layered = q.ndim == 5
    q5, k5, v5 = (q, k, v) if layered else (q[None], k[None], v[None])
    if bug == "swapped_strides" and layered:
        k5, v5 = _swap_layer_request(k5), _swap_layer_request(v5)
    NL, B, H_q, L, D = q5.shape
    H_kv, S = k5.shape[2], k5.shape[3]
    G = H_q // H_kv
    heads = mx.arange(H_q) % H_kv if bug == "gqa_mod" else mx.arange(H_q) // G
    kh = mx.take(k5, heads, axis=2).astype(mx.float32)  # (NL, B, H_q, S, D)
    vh = mx.take(v5, heads, axis=2).astype(mx.float32)
    vis = _visible(q5, S, mask, key_ranges)
    s = (q5.astype(mx.float32) * scale) @ kh.swapaxes(-1, -2) if vis is None or bug == "mask_after_exp" else None
    if vis is not None and bug != "mask_after_exp":
        seen = vis.any(axis=-2)[..., None]  # keys some row of the query head sees: others read as 0
        kh, vh = mx.where(seen, kh, 0.0), mx.where(seen, vh, 0.0)
        s = (q5.astype(mx.float32) * scale) @ kh.swapaxes(-1, -2)
    if mask is not None and not isinstance(mask, str) and mask.dtype != mx.bool_:
        add = mask.astype(mx.float32)
        s = s + mx.where(vis, add.reshape((1,) * (5 - add.ndim) + add.shape), 0.0)
    block = BLOCK
    if bug == "split_by_batch" and B > 1:
        block = max(1, -(-S // 2))
    starts = list(range(0, S, block))
    if bug == "drop_last_block" and len(starts) > 1:
        starts = starts[:-1]
    m = mx.full(s.shape[:-1] + (1,), -math.inf)
    l = mx.zeros_like(m)
    acc = mx.zeros(s.shape[:-1] + (D,))
    for j0 in starts:
        sb, vb = s[..., j0:j0 + block], vh[..., j0:j0 + block, :]
        visb = None if vis is None else vis[..., j0:j0 + block]
        if bug == "mask_after_exp":
            new = mx.maximum(m, sb.max(axis=-1, keepdims=True))
            p = mx.exp(sb - new) * (1.0 if visb is None else visb.astype(mx.float32))
            alpha = mx.exp(m - new)
        else:
            if visb is not None:
                sb = mx.where(visb, sb, -math.inf)
            new = mx.maximum(m, sb.max(axis=-1, keepdims=True))
            base = mx.where(new == -math.inf, 0.0, new)  # a row that has seen no key yet stays at 0
            p = mx.exp(sb - base)
            alpha = mx.exp(m - base)
        l = l * alpha + p.sum(axis=-1, keepdims=True)
        acc = (acc if bug == "no_rescale" else mx.where(alpha == 0, 0.0, acc * alpha)) + _product(p, vb)
        m = new
    out = mx.where(l > 0, acc / mx.where(l > 0, l, 1.0), 0.0).astype(q.dtype)
    return out if layered else out[0]


def _product(p, v):
    """p @ v where a weight of 0 takes nothing from its value, NaN included: the finite values
    by the product, NaN in the columns of a row that weighs a NaN or Inf."""
    import mlx.core as mx

    ok = mx.isfinite(v)
    hit = (p != 0).astype(mx.float32) @ (~ok).astype(mx.float32)
    return mx.where(hit > 0, mx.nan, p @ mx.where(ok, v, 0.0))


def _control(bug):
    def kernel(q, k, v, *, scale=None, mask=None, key_ranges=None):
        if scale is None:
            scale = q.shape[-1] ** -0.5
        return _attend(q, k, v, scale, mask, key_ranges, bug)

    kernel.__name__ = kernel.__qualname__ = bug
    kernel.__doc__ = f"Negative control: {CONTROLS[bug][1]}."
    if CONTROLS[bug][0] == "fusedattend":
        kernel.fa_supports = {"layers": "yes", "key_ranges": "yes"}
    return kernel


correct = _control("correct")
split_by_batch = _control("split_by_batch")
gqa_mod = _control("gqa_mod")
mask_after_exp = _control("mask_after_exp")
no_rescale = _control("no_rescale")
drop_last_block = _control("drop_last_block")
swapped_strides = _control("swapped_strides")
