"""Decode attention over a quantized prefix and a full-precision window, as one sequence.

    out = fa.windowed_decode_attention(q, (k_codes, k_scales, k_biases), (v_codes, v_scales, v_biases),
                                       window_keys, window_values, key_ranges=..., window_ranges=...)

Request b's keys are its quantized keys (its `key_ranges` range of the quantized arrays), then
its window keys (its `window_ranges` range of the window arrays), in that order: one sequence of
q_b + w_b keys ("virtual keys"), under one softmax. "causal" aligns to that sequence's end, the
window's newest key. Everything else (scale, GQA, zeros for a row that sees no key, dtypes) is
`decode_attention`'s.

Backends:
- cpu: the cpu backend's blocked online softmax (fusedattend.cpu's driver) over the virtual keys
  of each request, its blocks read from the quantized codes or the window in place. A request's
  virtual keys do not depend on where its rows lie in the buffers, so its output is bit for bit
  the same in any batch.
- reference: each request's virtual keys gathered (the quantized part dequantized, float32) and
  passed to the reference backend: the readable meaning.
- metal, cuda: two split launches, one over the quantized keys and one over the window, and one
  merge of both launches' blocks (fusedattend.window_gpu); nothing dequantized. Where that does
  not apply (causal rows reaching into the quantized part: a window shorter than L - 1 keys),
  as the reference, over the GPU's plain kernels.
"""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np

from . import backends
from ._problem import CAUSAL_MASK, MAX_FUSED_QUERY_LEN, NO_MASK, Problem, plain_problem, quantized_problem
from .key_ranges import KeyRanges, key_range_end


def windowed_decode_attention(queries, keys, values, window_keys, window_values, *, scale=None, mask=None,
                              key_ranges=None, window_ranges=None, bits=4, group_size=64, backend=None):
    """Attention over quantized keys followed by full-precision window keys (module docstring).

    Args:
        queries: (B, H_q, L, D).
        keys, values: (codes, scales, biases) triples of (B, H_kv, S_q, ·) in mx.quantize's
            format, or both None (no quantized part).
        window_keys, window_values: (B, H_kv, S_w, D) in the queries' dtype.
        key_ranges, window_ranges: per request, which keys of each part it holds: None (all of
            them), a KeyRanges or a (B, 2) integer array of (start, length); a length may be 0.
        mask: None or "causal" (aligned to the end of each request's keys).
    Returns (B, H_q, L, D) in the queries' dtype.
    """
    checked = _checked(queries, keys, values, window_keys, window_values, scale, mask, key_ranges, window_ranges, bits,
                       group_size)
    window, quantized, q_starts, q_lens, w_starts, w_lens = checked
    lengths = [q + w for q, w in zip(q_lens, w_lens)]
    causal = mask is not None and queries.shape[-2] > 1
    name = backends.resolve(backend)
    if name == "cpu" and queries.shape[-2] <= MAX_FUSED_QUERY_LEN:
        return _cpu(window, quantized, q_starts, q_lens, w_starts, lengths, causal, bits, group_size)
    if name in ("metal", "cuda") and queries.shape[-2] <= MAX_FUSED_QUERY_LEN:
        from . import window_gpu

        run = window_gpu.plan(window, quantized, w_lens, causal)
        if run is not None:
            return run(window.q, quantized and quantized.k, quantized and quantized.v, window.k, window.v)
    keys_v, values_v = virtual_keys(quantized and quantized.k, quantized and quantized.v, window.k, window.v,
                                    q_starts, q_lens, w_starts, w_lens, bits=bits, group_size=group_size,
                                    dtype=mx.float32 if name == "reference" else queries.dtype)
    from .api import decode_attention

    if name == "reference":
        queries = queries.astype(mx.float32)
    out = decode_attention(queries, keys_v, values_v, scale=window.scale, mask="causal" if causal else None,
                           key_ranges=KeyRanges([(0, n) for n in lengths]), backend=name)
    return out.astype(window.q.dtype)


def windowed_decode_plan(queries, keys, values, window_keys, window_values, *, scale=None, key_ranges=None,
                         window_ranges=None, bits=4, group_size=64, backend=None):
    """For a decode loop's repeats of one step (L = 1): the function
    run(queries, keys, values, window_keys, window_values) that launches what
    windowed_decode_attention launches for these arguments, without its checks; None where that
    call takes another path (the CPU and reference backends, past CUDA's grid).

    run takes arrays of these shapes and dtypes, but for a window of another length within the
    same number of blocks (of window_gpu.window_block() keys), under the same ranges: the caller vouches for
    that (QuantizedWindowCache keys its plans by them). The arguments are checked here once."""
    if isinstance(queries, mx.array) and queries.ndim == 4 and queries.shape[-2] != 1:
        raise ValueError(f"windowed_decode_plan is for decode steps of L = 1, got queries {tuple(queries.shape)}")
    window, quantized, *_, w_lens = _checked(queries, keys, values, window_keys, window_values, scale, None,
                                             key_ranges, window_ranges, bits, group_size)
    if backends.resolve(backend) not in ("metal", "cuda"):
        return None
    from . import window_gpu

    return window_gpu.plan(window, quantized, w_lens, causal=False)


def _checked(queries, keys, values, window_keys, window_values, scale, mask, key_ranges, window_ranges, bits,
             group_size):
    """The arguments checked: (window Problem, quantized Problem or None, then per request the
    quantized part's starts and lengths and the window's, as Python ints)."""
    if mask is not None and not (isinstance(mask, str) and mask == "causal"):
        if isinstance(mask, (str, mx.array)):
            raise ValueError(f'mask must be None or "causal" here (masks are per request ranges), got {mask!r:.40}')
        raise TypeError(f'mask must be None or "causal", got {type(mask).__name__}')
    if (keys is None) != (values is None):
        raise TypeError("keys and values must both be triples or both be None")
    if isinstance(queries, mx.array) and queries.ndim != 4:
        raise ValueError(f"queries must have shape (B, H_q, L, D), got {tuple(queries.shape)}")
    window = _window_problem(queries, window_keys, window_values, scale, window_ranges)
    quantized = None
    if keys is not None:
        quantized = quantized_problem(queries, keys, values, scale, None, key_ranges, bits, group_size)
    B, S_w = queries.shape[0], window_keys.shape[-2]
    w_starts, w_lens = _starts_lengths(window_ranges, window.key_ranges, B, S_w)
    if quantized is None:
        q_starts, q_lens = [0] * B, [0] * B
    else:
        q_starts, q_lens = _starts_lengths(key_ranges, quantized.key_ranges, B, keys[0].shape[-2])
    return window, quantized, q_starts, q_lens, w_starts, w_lens


_WINDOW_NAMES = {"keys": "window_keys", "values": "window_values", "key_ranges": "window_ranges"}


def _window_problem(queries, window_keys, window_values, scale, window_ranges):
    """plain_problem's checks of the window, its errors naming the window's arguments."""
    try:
        return plain_problem(queries, window_keys, window_values, scale, None, window_ranges)
    except (TypeError, ValueError) as err:
        message = re.sub(r"\b(keys|values|key_ranges)\b", lambda m: _WINDOW_NAMES[m.group(1)], str(err))
        raise type(err)(message) from None


def _starts_lengths(given, checked, B, S):
    """(starts, lengths) as Python ints: from a KeyRanges' own ints (nothing read back from the
    device), or from the checked (B, 2) array a (B, 2) array argument became (its check read it)."""
    if checked is None:
        return [0] * B, [S] * B
    if isinstance(given, KeyRanges):
        pairs = given.pairs_for(S)
        return [p[0] for p in pairs], [p[1] for p in pairs]
    pairs = checked.tolist()
    starts = [int(p[0]) for p in pairs]
    return starts, [key_range_end(s, int(p[1]), S) - s for s, p in zip(starts, pairs)]


# Tokens a dequantize of `virtual_keys(..., in_blocks=True)` covers. Goal: a prompt's attention
# over a quantized history holds no more than a bf16 cache's. mx.dequantize's CPU form holds about
# four times its output in temporaries (31 MiB for the 7.75 MiB of bf16 keys of 3968 tokens x 8
# heads x 128); in blocks of 512 tokens those are about 4 MiB while the blocks add up to the
# output. Dequantizing is elementwise, so the keys' bits do not depend on it. Decode steps keep one
# dequantize (the "dequantize, then SDPA" baseline's operation count is its own).
DEQUANTIZE_BLOCK = 512


def token_blocks(n, step=DEQUANTIZE_BLOCK):
    """(start, end) of tokens [0, n) in pieces of `step` tokens, the last one shorter."""
    return [(s, min(s + step, n)) for s in range(0, n, step)]


def _dequantized(triple, q, *, bits, group_size, dtype, in_blocks):
    """Tokens [0, q) of a quantized (codes, scales, biases) triple, dequantized: pieces to join."""
    return [mx.dequantize(*(x[:, :, s0:s1] for x in triple), group_size=group_size, bits=bits).astype(dtype)
            for s0, s1 in token_blocks(q, DEQUANTIZE_BLOCK if in_blocks else max(q, 1))]


def virtual_keys(kq, vq, kw, vw, q_starts, q_lens, w_starts, w_lens, *, bits, group_size, dtype, in_blocks=False):
    """Each request's keys and values as one left-aligned sequence (quantized part dequantized,
    then its window), padded with zeros to the longest: (B, H_kv, max(q + w), D) in `dtype`.

    A constant number of MLX operations at any B: dequantize, concatenate, one gather; where
    every request's keys lie at the same rows, a dequantize and a concatenation. `in_blocks`:
    dequantized DEQUANTIZE_BLOCK tokens at a time (a prompt's, for its peak memory)."""
    B = kw.shape[0]
    lengths = [q + w for q, w in zip(q_lens, w_lens)]
    if len(set(q_lens)) == 1 and len(set(w_lens)) == 1 and not any(q_starts) and not any(w_starts) and lengths[0]:
        # Every request's keys at the same rows (one request, or a batch in step): no gather,
        # and only the quantized tokens dequantized.
        q, w = q_lens[0], w_lens[0]

        def joined(quantized, window):
            parts = _dequantized(quantized, q, bits=bits, group_size=group_size, dtype=dtype,
                                 in_blocks=in_blocks) if q else []
            parts += [window[:, :, :w].astype(dtype)] if w else []
            return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=2)

        return joined(kq, kw), joined(vq, vw)
    S = max(1, max(lengths))
    parts_k, parts_v = [kw.astype(dtype)], [vw.astype(dtype)]
    S_q = 0
    if kq is not None:
        S_q = kq[0].shape[-2]
        parts_k[:0] = _dequantized(kq, S_q, bits=bits, group_size=group_size, dtype=dtype, in_blocks=in_blocks)
        parts_v[:0] = _dequantized(vq, S_q, bits=bits, group_size=group_size, dtype=dtype, in_blocks=in_blocks)
    j = np.arange(S)[None, :]
    qs, ql, ws = (np.array(x, np.int64)[:, None] for x in (q_starts, q_lens, w_starts))
    index = np.where(j < ql, qs + j, S_q + ws + j - ql)
    pad = j >= np.array(lengths)[:, None]
    index = np.where(pad, 0, index).astype(np.int32)
    index = mx.array(index).reshape(B, 1, S, 1)
    keep = mx.array(~pad).reshape(B, 1, S, 1)

    def gather(parts):
        full = parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-2)
        taken = mx.take_along_axis(full, mx.broadcast_to(index, (*full.shape[:2], S, 1)), axis=-2)
        return mx.where(keep, taken, mx.zeros((), dtype))  # padding is zeros, never stale keys

    return gather(parts_k), gather(parts_v)


# --- the cpu backend's driver over the virtual keys ------------------------------------------


class _Shape:
    """Stands in for K in Problem.shape: the virtual keys' (NL, B, H_kv, S, D)."""

    def __init__(self, shape):
        self.shape = shape


class _VirtualBlocks:
    """fusedattend.cpu's block source over one part of K or V: keys [s0, s1) of a request's
    virtual sequence, read from the quantized codes (widened by cpu's own code) and the window."""

    def __init__(self, quantized, window, q_starts, q_lens, w_starts, bits, group_size, tag):
        from . import cpu

        self._cpu = cpu
        self.tag = tag
        self.q_starts, self.q_lens, self.w_starts = q_starts, q_lens, w_starts
        self.window = cpu._numpy_view(window)
        self.quantized = None
        if quantized is not None:
            self.quantized = (np.asarray(quantized.codes), cpu._numpy_view(quantized.scales),
                              cpu._numpy_view(quantized.biases))
        self.bits, self.group_size = bits, group_size
        # The window is widened in the codes' phases even where no request has a quantized key:
        # a request's sums then run in one order whether or not its batch holds quantized keys.
        self.phases = 8 // bits

    def _window_phases(self, block):
        wide = self._cpu._small_to_f32(block)  # bfloat16 bits, float16 or float32 to float32
        if self.phases == 1:
            return [np.ascontiguousarray(wide)]
        return [np.ascontiguousarray(wide[..., p::self.phases]) for p in range(self.phases)]

    def __call__(self, l, b, h0, h1, s0, s1):
        q_len = self.q_lens[b]
        parts = []
        if s0 < q_len:
            start = self.q_starts[b]
            codes, scales, biases = (x[l, b, h0:h1, start + s0:start + min(s1, q_len)] for x in self.quantized)
            parts.append(self._cpu._code_phases(codes, scales, biases, self.bits, self.group_size, self.tag))
        if s1 > q_len:
            start = self.w_starts[b] - q_len
            parts.append(self._window_phases(self.window[l, b, h0:h1, start + max(s0, q_len):start + s1]))
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(pair, axis=-2) for pair in zip(*parts)]


def _cpu(window: Problem, quantized, q_starts, q_lens, w_starts, lengths, causal, bits, group_size):
    from . import cpu

    window = window.with_layer_axis()
    arrays = [window.q, window.k, window.v]
    if quantized is not None:
        quantized = quantized.with_layer_axis()
        arrays += [*quantized.k, *quantized.v]
    mx.eval(*arrays)
    NL, B, H_q, L, D = window.q.shape
    H_kv = window.k.shape[2]
    problem = Problem(window.q, _Shape((NL, B, H_kv, max(1, max(lengths)), D)), None, window.scale,
                      CAUSAL_MASK if causal else NO_MASK, mx.array([[0, n] for n in lengths], dtype=mx.int32),
                      True)
    k_part = quantized.k if quantized is not None else None
    v_part = quantized.v if quantized is not None else None
    out = cpu._run(problem, _VirtualBlocks(k_part, window.k, q_starts, q_lens, w_starts, bits, group_size, "wk"),
                   _VirtualBlocks(v_part, window.v, q_starts, q_lens, w_starts, bits, group_size, "wv"))
    return out[0]


__all__ = ["virtual_keys", "windowed_decode_attention"]
