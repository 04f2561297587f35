"""QuantizedWindowCache: an mlx_lm KV cache quantized in mx.quantize's format, with a
full-precision window of each request's newest tokens; one class for one request and for a batch.

    import fusedattend as fa
    cache = fa.make_prompt_cache(model, bits=4, group_size=64, window=128)
    restore = fa.patch_mlx_lm()       # decode steps over this cache go to the fused call
    mlx_lm.generate(model, tokenizer, prompt, prompt_cache=cache)

Layout, per layer and request b (rows of the batch are independent):
- quantized keys and values: (codes, scales, biases) of (B, H, capacity, ·), preallocated and grown
  by QUANTIZED_STEP tokens; request b's quantized tokens are rows 0 .. q_b - 1.
- the window: (B, H, 2 * window, D) in the model's dtype; request b's window tokens are rows
  0 .. w_b - 1, oldest first. Row 2 * window - 1 is never a token: padded rows of a batched
  prompt are written there and never read.

Flush rule: tokens enter the window. When an update brings a request's window to 2 * window
tokens or more, its oldest tokens are quantized, a whole multiple of `window` of them, so that
between `window` and 2 * window - 1 tokens stay in full precision (fewer only while the request
holds fewer than `window`, or after a trim). From empty, a request of T tokens holds
window * max(0, T // window - 1) of them quantized. Quantization is per token (groups run along
D), so a token's codes do not depend on when or beside whom it was quantized: a request's cache
is the same alone and in any batch. Nothing already quantized is quantized again.

MLX operations a layer and decode step (test_operations_a_decode_step): two window writes (slice
updates; where a batch's windows differ in length, two scatters and one broadcast of their
index); a flush adds, per request that flushes, two concatenations, two quantizations, eight
writes and slices (views), once every `window` steps.

What attention sees: the update that first fills an empty cache (a prompt's first chunk) attends
its own keys and values as they came, in full precision, as over a KVCache: prefill copies and
dequantizes nothing. Every later update attends the cache: its quantized tokens dequantized, then
its window.

What update_and_fetch returns: under fusedattend.patch_mlx_lm, markers (`CacheView`) that the
patched attention reads the cache through (windowed_decode_attention for L <= 8 query rows,
else mx.fast.scaled_dot_product_attention over each request's keys dequantized). Unpatched, each
request's keys dequantized, left-aligned and zero-padded (`virtual_keys`), which mlx_lm's own
attention takes with `make_mask`'s mask: the "dequantize, then SDPA" baseline.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from . import backends, window_gpu
from ._problem import FLOAT_DTYPES, MAX_FUSED_QUERY_LEN, check_bits
from .key_ranges import KeyRanges
from .window_attention import token_blocks, virtual_keys, windowed_decode_attention, windowed_decode_plan

QUANTIZED_STEP = 256  # quantized buffers grow by this many tokens (mlx_lm's own step)
DEFAULT_WINDOW = 128  # HF's QuantizedCache residual_length and KIVI's default R

# How many patch_mlx_lm patches are in force: update_and_fetch then returns CacheViews.
_PATCHES = [0]


class CacheView(NamedTuple):
    """What update_and_fetch returns under patch_mlx_lm, for keys ("k") and values ("v").
    `fresh`: the update's own keys (values) where the cache held no token before it, else None."""

    cache: "QuantizedWindowCache"
    part: str
    fresh: object = None


def _check_window(window):
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if window < 1:
        raise ValueError(f"window must be at least 1 token, got {window}")


def _ranges(right):
    """KeyRanges.from_padding(right=right), one object per distinct padding, shared by the layers
    and kept from step to step while it holds (a new one is a new array for the kernels to wait
    for on a GPU); None where no request has padding."""
    key = tuple(right)
    if not any(key):
        return None
    ranges = _RANGES.get(key)
    if ranges is None:
        if len(_RANGES) > 256:
            _RANGES.clear()
        ranges = _RANGES[key] = KeyRanges.from_padding(right=key)
    return ranges


_RANGES = {}

# Decode steps' launch plans (windowed_decode_plan), by everything a plan fixes: the queries'
# shape and dtype, scale, what picks the backend and its schedule, the buffers' shapes and dtypes
# but the window's length, and the paddings; each entry is (its window block, plans by the
# window's blocks). The layers of a model share them, and a decode loop makes one a flush; a step
# through a plan skips the checks and set-up of windowed_decode_attention (tens of µs a layer).
_PLANS = {}
_PLANS_MAX = 256
backends.forget_when_replays_are(_PLANS.clear)


class QuantizedWindowCache:
    """mlx_lm's cache contract (update_and_fetch, offset, make_mask, state, trim, merge and the
    batch methods) over quantized tokens and a full-precision window (module docstring)."""

    def __init__(self, bits=4, group_size=64, window=DEFAULT_WINDOW):
        check_bits(bits, group_size)
        _check_window(window)
        self.quant_bits, self.quant_group_size, self.window = bits, group_size, window
        self._kq = self._vq = None  # [codes, scales, biases] or None
        self._wk = self._wv = None
        self._qlen, self._wlen = [0], [0]
        self._batched = False
        self._pending = None  # per request, the real tokens of a right-padded prompt still to come
        self._last = [0]  # per request, the real tokens of the last update
        self.offset = 0

    # --- the contract's small members ---

    @property
    def batch_size(self):
        return len(self._qlen)

    @property
    def lengths(self):
        """Per request, the tokens held."""
        return [q + w for q, w in zip(self._qlen, self._wlen)]

    @property
    def quantized_lengths(self):
        return list(self._qlen)

    @property
    def window_lengths(self):
        return list(self._wlen)

    def size(self):
        return max(self.lengths)

    def empty(self):
        return self._wk is None

    def is_trimmable(self):
        return True

    @property
    def nbytes(self):
        arrays = [*(self._kq or ()), *(self._vq or ()), self._wk, self._wv]
        return sum(a.nbytes for a in arrays if a is not None)

    def _set_offset(self):
        self.offset = mx.array(self.lengths) if self._batched else self.lengths[0]

    def trim(self, n):
        """Drop up to n newest tokens of every request, within the window: tokens already
        quantized stay. Returns how many were dropped."""
        n = max(0, min(operator.index(n), *self._wlen))
        if n:
            self._wlen = [w - n for w in self._wlen]
            self._set_offset()
        return n

    # --- writing ---

    def _check_kv(self, keys, values):
        for x, name in ((keys, "keys"), (values, "values")):
            if not isinstance(x, mx.array):
                raise TypeError(f"{name} must be an mlx.core.array, got {type(x).__name__}")
            if x.ndim != 4 or x.dtype not in FLOAT_DTYPES:
                raise ValueError(f"{name} must be a float (B, H, L, D) array, got {x.dtype} {tuple(x.shape)}")
        if keys.shape != values.shape:
            raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must have one shape "
                             "(a layer whose values are narrower than its keys, as MLA's, cannot be served)")
        if keys.shape[-1] % self.quant_group_size:
            raise ValueError(f"group_size={self.quant_group_size} must divide the head dimension {keys.shape[-1]}")
        B = keys.shape[0]
        if B != self.batch_size:
            if not self.empty() or self._batched:
                raise ValueError(f"keys hold {B} requests, the cache {self.batch_size}")
            self._qlen, self._wlen, self._last = [0] * B, [0] * B, [0] * B
        if self._wk is not None and (keys.dtype != self._wk.dtype or keys.shape[1:2] + keys.shape[3:] !=
                                     self._wk.shape[1:2] + self._wk.shape[3:]):
            raise ValueError(f"keys {keys.dtype} {tuple(keys.shape)} do not match the cache's "
                             f"{self._wk.dtype} {tuple(self._wk.shape)}")

    def _grow_quantized(self, need, like):
        """Quantized buffers of at least `need` tokens (a multiple of QUANTIZED_STEP)."""
        have = 0 if self._kq is None else self._kq[0].shape[2]
        if need <= have:
            return
        cap = -(-need // QUANTIZED_STEP) * QUANTIZED_STEP
        B, H, _, D = like.shape
        shapes = [(D * self.quant_bits // 32, mx.uint32), (D // self.quant_group_size, like.dtype),
                  (D // self.quant_group_size, like.dtype)]

        def grown(old):
            new = [mx.zeros((B, H, cap - have, width), dtype) for width, dtype in shapes]
            return new if old is None else [mx.concatenate([o, n], axis=2) for o, n in zip(old, new)]

        self._kq, self._vq = grown(self._kq), grown(self._vq)

    def update_and_fetch(self, keys, values):
        self._check_kv(keys, values)
        B, H, L, D = keys.shape
        fresh = not any(self.lengths)
        if self._pending is not None:
            take = [min(p, L) for p in self._pending]
            self._pending = [p - t for p, t in zip(self._pending, take)]
        else:
            take = [L] * B
        W = self.window
        if self._wk is None:
            self._wk = mx.zeros((B, H, 2 * W, D), keys.dtype)
            self._wv = mx.zeros((B, H, 2 * W, D), values.dtype)
        new_w = [w + t for w, t in zip(self._wlen, take)]
        flush = [W * ((n - W) // W) if n >= 2 * W else 0 for n in new_w]
        if not any(flush):
            self._append(keys, values, take)
        else:
            self._grow_quantized(max(q + f for q, f in zip(self._qlen, flush)), keys)
            # A batch in step (requests of one length, as a batch of equal prompts stays) flushes
            # in one go, its operations as many as one request's: quantization is per token, so
            # each request's bits are still its own alone. Otherwise a request at a time.
            in_step = len(set(zip(self._qlen, self._wlen, take, flush))) == 1
            for rows in [slice(0, B)] if in_step else [slice(b, b + 1) for b in range(B)]:
                b = rows.start
                if flush[b]:
                    self._flush(rows, keys, values, take[b], flush[b])
                elif take[b]:
                    w = self._wlen[b]
                    self._wk[rows, :, w:w + take[b]] = keys[rows, :, :take[b]]
                    self._wv[rows, :, w:w + take[b]] = values[rows, :, :take[b]]
            self._qlen = [q + f for q, f in zip(self._qlen, flush)]
        self._wlen = [n - f for n, f in zip(new_w, flush)]
        self._last = take
        self._set_offset()
        if _PATCHES[0]:
            return CacheView(self, "k", keys if fresh else None), CacheView(self, "v", values if fresh else None)
        # A first update (a prompt's first chunk) attends its own keys as they came, like a
        # KVCache's: nothing dequantized nor copied. They lie as dequantized() would lay them.
        return (keys, values) if fresh else self.dequantized()

    def _append(self, keys, values, take):
        """New tokens into the windows, no flush: one write for K and one for V."""
        L = keys.shape[2]
        w = self._wlen[0]
        if all(n == w for n in self._wlen) and all(t == L for t in take):
            self._wk[:, :, w:w + L] = keys
            self._wv[:, :, w:w + L] = values
            return
        # Rows past a request's real tokens (right padding) go to the never-read last row.
        spare = 2 * self.window - 1
        rows = [[w + i if i < t else spare for i in range(L)] for w, t in zip(self._wlen, take)]
        # One index for K and V, broadcast over heads and D once (put_along_axis would broadcast it
        # for each): three operations, the scatters and that broadcast.
        index = mx.broadcast_to(mx.array(np.array(rows, np.int32).reshape(len(rows), 1, L, 1)), keys.shape)
        self._wk = mx.put_along_axis(self._wk, index, keys, axis=2)
        self._wv = mx.put_along_axis(self._wv, index, values, axis=2)

    def _flush(self, rows, keys, values, take, count):
        """The windows of requests `rows` (a slice; their lengths alike) and their `take` new
        tokens: the oldest `count` quantized, the rest the new windows."""
        w, q = self._wlen[rows.start], self._qlen[rows.start]
        for window, new, quantized in ((self._wk, keys, self._kq), (self._wv, values, self._vq)):
            tokens = new[rows, :, :take]
            if w:
                tokens = mx.concatenate([window[rows, :, :w], tokens], axis=2)
            # a prompt's tokens a block at a time: mx.quantize's temporaries, like mx.dequantize's
            # (window_attention.DEQUANTIZE_BLOCK), are a few times its input (the rows' tokens of
            # the block: B times one request's for a batch in step, as its attention's); a decode step's
            # flush (window tokens) is one block. Tokens are quantized one by one: same bits.
            for s0, s1 in token_blocks(count):
                for buffer, part in zip(quantized, mx.quantize(tokens[:, :, s0:s1], group_size=self.quant_group_size,
                                                               bits=self.quant_bits)):
                    buffer[rows, :, q + s0:q + s1] = part
            window[rows, :, :w + take - count] = tokens[:, :, count:]

    # --- reading ---

    def dequantized(self, in_blocks=False):
        """Each request's keys and values, quantized ones dequantized (the cache's dtype),
        left-aligned and zero-padded to the longest: what mlx_lm's own attention takes.
        `in_blocks`: a few hundred tokens a dequantize, for a prompt's peak memory."""
        return virtual_keys(self._kq, self._vq, self._wk, self._wv, [0] * self.batch_size, self._qlen,
                            [0] * self.batch_size, self._wlen, bits=self.quant_bits,
                            group_size=self.quant_group_size, dtype=self._wk.dtype, in_blocks=in_blocks)

    def attend(self, queries, scale, backend=None):
        """Decode attention of `queries` (B, H_q, L, D) over the cache (causal when L > 1).

        The quantized buffers go whole, each request's tokens followed by padding whose length
        changes only when it flushes; the window is cut to the longest request's, so its padding
        changes only with a flush too, and a request alone (or a batch in step) has none."""
        has_q = any(self._qlen)
        kq = vq = None
        q_padding = ()
        if has_q:
            kq, vq = self._kq, self._vq
            q_padding = tuple(kq[0].shape[2] - q for q in self._qlen)
        w = max(1, max(self._wlen))
        w_padding = tuple(w - n for n in self._wlen)
        wk, wv = self._wk[:, :, :w], self._wv[:, :, :w]
        if queries.shape[-2] == 1:  # a decode step: launched by the plan of its shapes and ranges
            run = self._plan(queries, scale, backend, kq, vq, wk, wv, q_padding, w_padding)
            if run is not None:
                return run(queries, kq, vq, wk, wv)
        return windowed_decode_attention(
            queries, kq, vq, wk, wv, scale=scale, mask="causal" if queries.shape[-2] > 1 else None,
            key_ranges=_ranges(q_padding), window_ranges=_ranges(w_padding),
            bits=self.quant_bits, group_size=self.quant_group_size, backend=backend)

    def _plan(self, queries, scale, backend, kq, vq, wk, wv, q_padding, w_padding):
        """windowed_decode_plan's function for this step, made once for every layer and step of
        the same shapes, dtypes, paddings and window blocks (_PLANS), or None (the CPU)."""
        quantized = kq and (kq[0].shape, kq[1].shape, kq[1].dtype)
        key = (queries.shape, queries.dtype, scale, backends.replay_key(backend), wk.shape[:2], wk.shape[3], wk.dtype,
               quantized, self.quant_bits, self.quant_group_size, q_padding, w_padding)
        try:
            block, runs = _PLANS[key]
        except KeyError:
            if len(_PLANS) >= _PLANS_MAX:
                _PLANS.clear()
            # the key holds what picks the policy (replay_key), so its window block holds too
            block, runs = _PLANS[key] = window_gpu.window_block(), {}
        except TypeError:  # an unhashable scale: windowed_decode_attention names it
            return None
        blocks = -(-wk.shape[2] // block)
        run = runs.get(blocks)
        if run is not None:
            return run
        run = runs[blocks] = windowed_decode_plan(
            queries, kq, vq, wk, wv, scale=scale, key_ranges=_ranges(q_padding),
            window_ranges=_ranges(w_padding), bits=self.quant_bits, group_size=self.quant_group_size,
            backend=backend)
        return run

    def last_update_padded(self):
        """Whether the last update's rows were right-padded for some request (a batched prompt)."""
        return len(set(self._last)) > 1

    def attention_mask(self, N):
        """The mask over `dequantized()`'s keys for the last update's N query rows: None or
        "causal" where every request is aligned, else a boolean array."""
        return _dense_mask(self.lengths, self._last, N, return_array=False)

    def make_mask(self, N, return_array=False, window_size=None, **kwargs):
        """The mask the model's next update of N tokens needs (mlx_lm asks before updating)."""
        if window_size is not None:
            raise ValueError("window_size: QuantizedWindowCache does not serve sliding-window attention")
        if _PATCHES[0] and N <= MAX_FUSED_QUERY_LEN and not return_array:
            return None if N == 1 else "causal"  # the patched step reads the cache's own ranges
        take = [min(p, N) for p in self._pending] if self._pending is not None else [N] * self.batch_size
        return _dense_mask([t + n for t, n in zip(self.lengths, take)], take, N, return_array)

    # --- state: mlx_lm's save_prompt_cache / load_prompt_cache ---

    @property
    def meta_state(self):
        return tuple(str(x) for x in (self.quant_bits, self.quant_group_size, self.window, int(self._batched),
                                       *self._qlen, *self._wlen))

    @meta_state.setter
    def meta_state(self, v):
        bits, group_size, window, batched, *lengths = (int(x) for x in v)
        self.quant_bits, self.quant_group_size, self.window, self._batched = bits, group_size, window, bool(batched)
        B = len(lengths) // 2
        self._qlen, self._wlen, self._last = lengths[:B], lengths[B:], [0] * B
        self._pending = None

    @property
    def state(self):
        """The six quantized arrays, the two windows (cut to the longest request's tokens; None
        where empty) and the meta_state's ints."""
        q, w = max(self._qlen), max(self._wlen)
        quantized = [x[:, :, :q] if q else None for x in [*(self._kq or [None] * 3), *(self._vq or [None] * 3)]]
        window = [x[:, :, :w] if w else None for x in (self._wk, self._wv)]
        return [*quantized, *window, [int(x) for x in self.meta_state]]

    @state.setter
    def state(self, v):
        *arrays, meta = v
        self.meta_state = meta
        self._kq = None if arrays[0] is None else list(arrays[0:3])
        self._vq = None if arrays[3] is None else list(arrays[3:6])
        wk, wv = arrays[6], arrays[7]
        self._wk = self._wv = None
        if wk is not None:
            pad = [(0, 0), (0, 0), (0, 2 * self.window - wk.shape[2]), (0, 0)]
            self._wk, self._wv = mx.pad(wk, pad), mx.pad(wv, pad)
        elif self._kq is not None:  # every window trimmed away: empty windows of the quantized shape
            B, H, _, _ = self._kq[0].shape
            D = self._kq[1].shape[-1] * self.quant_group_size
            self._wk = mx.zeros((B, H, 2 * self.window, D), self._kq[1].dtype)
            self._wv = mx.zeros_like(self._wk)
        self._set_offset()

    @classmethod
    def from_state(cls, state, meta_state=None):
        self = cls.__new__(cls)
        self.state = state
        return self

    # --- batches: mlx_lm's BatchGenerator ---

    @classmethod
    def merge(cls, caches):
        """One batched cache of per-request (or batched) caches, in order."""
        from .window_batch import concatenated

        return concatenated(cls, caches)

    def extend(self, other):
        from .window_batch import concatenated

        self.__dict__.update(concatenated(type(self), [self, other]).__dict__)

    def filter(self, batch_indices):
        """Keep the requests batch_indices, in that order."""
        keep = [operator.index(i) for i in batch_indices]
        if self._wk is not None:
            index = mx.array(keep)
            self._wk, self._wv = self._wk[index], self._wv[index]
            if self._kq is not None:
                self._kq, self._vq = [x[index] for x in self._kq], [x[index] for x in self._vq]
        self._qlen, self._wlen = [self._qlen[i] for i in keep], [self._wlen[i] for i in keep]
        self._last = [self._last[i] for i in keep]
        if self._pending is not None:
            self._pending = [self._pending[i] for i in keep]
        self._set_offset()

    def extract(self, idx):
        """Request idx as a cache of its own (not batched)."""
        one = type(self)(self.quant_bits, self.quant_group_size, self.window)
        one._qlen, one._wlen, one._last = [self._qlen[idx]], [self._wlen[idx]], [0]
        if self._wk is not None:
            one._wk, one._wv = (mx.contiguous(x[idx:idx + 1]) for x in (self._wk, self._wv))
            if self._kq is not None:
                one._kq, one._vq = ([mx.contiguous(x[idx:idx + 1]) for x in part] for part in (self._kq, self._vq))
        one._set_offset()
        return one

    def prepare(self, *, left_padding=None, lengths=None, right_padding=None):
        """A right-padded prompt comes next: request b's first lengths[b] tokens are real."""
        if left_padding is not None and any(left_padding):
            raise ValueError("left_padding: QuantizedWindowCache keeps each request's tokens left-aligned; "
                             "pass lengths and right_padding")
        if right_padding is not None and any(right_padding):
            if lengths is None:
                raise ValueError("lengths must be given with right_padding")
            if len(lengths) != self.batch_size:
                raise ValueError(f"lengths must hold {self.batch_size} requests, got {len(lengths)}")
            self._pending = [operator.index(n) for n in lengths]

    def finalize(self):
        self._pending = None


def _dense_mask(totals, lengths, N, return_array):
    """None, "causal" or a boolean (B, 1, N, S) array: request b holds totals[b] keys, left-aligned,
    its newest lengths[b] the real rows of the N queries (the others right padding)."""
    if not return_array and all(t == totals[0] for t in totals) and all(n == N for n in lengths):
        return None if N == 1 else "causal"
    S = max(1, max(totals))
    j = np.arange(S)[None, None, :]
    i = np.arange(N)[None, :, None]
    tot, n = np.array(totals)[:, None, None], np.maximum(np.array(lengths), 1)[:, None, None]
    last = tot - n + np.minimum(i, n - 1)  # a padded row sees what its request's last real row sees
    return mx.array((j <= last) & (j < tot)).reshape(len(totals), 1, N, S)
