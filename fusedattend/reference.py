"""The reference backend: a readable mlx.core composition that defines what every kernel computes.

It is always available, serves as the fallback (L > 8, or no faster backend here), and is the
meaning the kernels are tested against. Same signature as the kernel backends:

    decode_attention(problem) -> (NL, B, H_q, L, D) in the queries' dtype

Semantics, per query row i of head h in request b (G = H_q // H_kv, kv head = h // G):
    visible(j) = key_range(b) holds j  and  the mask lets i see j
    s_j        = scale * q_i . k_j (+ additive mask), accumulated in float32
    out_i      = sum_{visible j} softmax(s)_j * v_j,   or zeros when no key is visible
An additive mask hides a key only where it is -inf. A key a row does not see never enters that
row, whatever its K or V hold, and a value whose weight is 0 (a score that underflows) is skipped:
NaN or Inf there cannot reach the row. NaN that reaches a visible score (from K, the scale or a
NaN / +inf mask entry) makes the row NaN, and NaN in a value of non-zero weight its column:
nothing reads the data to check it, and zeros would pass for a row that sees no key.
"""

from __future__ import annotations

import mlx.core as mx

from ._problem import Mask, Problem, QuantizedKV


def visibility(problem: Problem):
    """Boolean array broadcastable to (NL, B, H_q, L, S), or None when every key is visible."""
    NL, B, H_q, H_kv, L, S, D = problem.shape
    mask = problem.mask
    visible = None
    key = mx.arange(S)
    if problem.key_ranges is not None:
        start = problem.key_ranges[:, 0].reshape(1, B, 1, 1, 1)
        second = problem.key_ranges[:, 1].reshape(1, B, 1, 1, 1)
        end = mx.where(second >= 0, start + second, S + 1 + second)  # key_ranges.key_range_end
        visible = (key >= start) & (key < end)
        last = end  # causal alignment: the last query row sees the range's last key
    else:
        last = mx.array(S)
    if mask.kind == "causal":
        row = mx.arange(L).reshape(L, 1)
        causal = key <= (last - L + row)
        visible = causal if visible is None else visible & causal
    elif mask.kind == "bool":
        visible = mask.array if visible is None else visible & mask.array
    elif mask.kind == "additive":
        shown = mask.array != -mx.inf  # NaN and +inf join the score: the row is NaN
        visible = shown if visible is None else visible & shown
    return visible


def _attend(problem: Problem, keys: mx.array, values: mx.array) -> mx.array:
    NL, B, H_q, H_kv, L, S, D = problem.shape
    G = H_q // H_kv
    # Query heads of one GQA group become extra rows of one matmul against their kv head.
    q = (problem.q.astype(mx.float32) * problem.scale).reshape(NL, B, H_kv, G * L, D)
    scores = (q @ keys.astype(mx.float32).swapaxes(-1, -2)).reshape(NL, B, H_q, L, S)
    if problem.mask.kind == "additive":
        scores = scores + problem.mask.array.astype(mx.float32)
    visible = visibility(problem)
    values = values.astype(mx.float32)
    if visible is not None:
        scores = mx.where(visible, scores, -mx.inf)
    row_max = mx.max(scores, axis=-1, keepdims=True)
    row_max = mx.where(row_max == -mx.inf, 0.0, row_max)
    weights = mx.exp(scores - row_max)  # hidden keys: exp(-inf) = 0
    denom = mx.sum(weights, axis=-1, keepdims=True)
    out = weighted_values(weights.reshape(NL, B, H_kv, G * L, S), values).reshape(NL, B, H_q, L, D)
    seen = denom != 0  # NaN stays NaN: data that reached a score is never hidden as zeros
    out = mx.where(seen, out / mx.where(seen, denom, 1.0), 0.0)
    return out.astype(problem.q.dtype)


def weighted_values(weights: mx.array, values: mx.array) -> mx.array:
    """weights @ values over the keys of non-zero weight only: (..., M, S) @ (..., S, D).

    A plain product would turn the zero weight of a key a row does not see into 0 * NaN = NaN
    where that key's value holds NaN or Inf. So the product runs over the finite values, and a
    row that weighs a non-finite value takes NaN in its column (one indicator product finds
    them; its counts are exact and only their sign is read).
    """
    finite = mx.isfinite(values)
    out = weights @ mx.where(finite, values, 0.0)
    reached = (weights != 0).astype(mx.float32) @ (~finite).astype(mx.float32)
    return mx.where(reached > 0, mx.nan, out)


def dequantize(kv: QuantizedKV, bits: int, group_size: int) -> mx.array:
    """Float32 K or V from an mx.quantize triple (scales and biases upcast first)."""
    return mx.dequantize(
        kv.codes, kv.scales.astype(mx.float32), kv.biases.astype(mx.float32),
        group_size=group_size, bits=bits,
    )


def decode_attention(problem: Problem) -> mx.array:
    problem = problem.with_layer_axis()
    return _attend(problem, problem.k, problem.v)


def quantized_decode_attention(problem: Problem) -> mx.array:
    problem = problem.with_layer_axis()
    keys = dequantize(problem.k, problem.bits, problem.group_size)
    values = dequantize(problem.v, problem.bits, problem.group_size)
    return _attend(problem, keys, values)
