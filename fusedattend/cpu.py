"""The "cpu" backend: split-KV decode attention in numpy (BLAS underneath), reading MLX's buffers.

Semantics are exactly those of fusedattend.reference (its docstring); this module only changes
how the work is laid out so that a decode step reads the K/V cache once, from where it lies:

* Zero copies of the cache. An evaluated mx.array on the CPU exports its buffer (strides and
  offset included, so `cache[..., :S, :]` slices stay views); bfloat16 has no numpy dtype, so it
  is viewed as uint16 bytes. Only one key block at a time is ever widened to float32.
* Fixed-size key blocks. Every (layer, request, kv-head chunk, block) is an independent unit
  producing a partial softmax (row max, row sum, unnormalised output); the partials of a request
  are merged in block order. Block boundaries depend only on KEY_BLOCK and the request's own key
  window, never on B, NL, the head chunks or the thread that ran the unit, so a batched call
  equals per-request calls bit for bit at any thread count, and memory stays bounded at any S.
  Threads: fusedattend.cpu_threads (one level: our workers, BLAS single-threaded in them).
* GQA: the G query heads of a kv head (times L rows) are the M columns of one
  (block, D) x (D, M) product, so each K/V block is read once for the whole group.
* "Phases" instead of interleaving: a 32-bit word of bfloat16 K holds elements 2i and 2i+1; a byte
  of 4-bit codes holds elements 2i and 2i+1; of 2-bit codes, 4i..4i+3. Rather than interleaving
  them back into (block, D) we split D into P strided phases (element d = P*i + p), widen each
  phase with one vectorised ufunc into a contiguous array, and sum the P partial products
  (q's phase p against K's phase p); V's phase p fills the output's columns p::P.
"""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np

from ._problem import Problem, QuantizedKV
from .cpu_threads import ordered, single_threaded_blas, threads
from .key_ranges import key_range_end

KEY_BLOCK = 1024  # keys per unit of work; a module constant, so results never depend on the batch
UNITS_PER_WORKER = 1  # see _head_chunks

_NEG_INF = np.float32(-np.inf)


def _numpy_view(x: mx.array) -> np.ndarray:
    """A numpy view of an evaluated mx.array's buffer (bfloat16 as its uint16 bit patterns)."""
    if x.dtype == mx.bfloat16:
        x = x.view(mx.uint16)
    return np.asarray(x)


# --- widening one block of keys or values into float32 phases ---------------------------------


_local = threading.local()


def _scratch(tag: str, shape, dtype) -> np.ndarray:
    """A per-thread buffer reused across blocks. Fresh multi-megabyte arrays would come from
    mmap and page-fault on every block, which measured slower than the arithmetic itself."""
    pool = getattr(_local, "buffers", None)
    if pool is None:
        pool = _local.buffers = {}
    key = (tag, tuple(shape), np.dtype(dtype).str)
    buf = pool.get(key)
    if buf is None:
        if len(pool) > 64:  # many shapes seen: start over rather than grow without bound
            pool.clear()
        buf = pool[key] = np.empty(shape, dtype)
    return buf


def _packed_rows(x: np.ndarray, tag: str) -> np.ndarray:
    """x, or a copy of it with D contiguous where a view strides D. The bfloat16 phases pair a
    row's neighbours, and BLAS sums a strided row in another order than a packed one: the bits
    must not depend on how the caller's buffer lies."""
    if x.strides[-1] == x.itemsize:
        return x
    packed = _scratch(tag + "packed", x.shape, x.dtype)
    np.copyto(packed, x)
    return packed


def _bf16_phases(u16: np.ndarray, tag: str):
    """(…, n, D) bfloat16 bits -> [even elements, odd elements] as float32 (…, n, D/2)."""
    words = u16.view(np.uint32)  # little end first: element 2i in the low half, 2i+1 in the high
    even = np.left_shift(words, np.uint32(16), out=_scratch(tag + "0", words.shape, np.uint32))
    odd = np.bitwise_and(
        words, np.uint32(0xFFFF0000), out=_scratch(tag + "1", words.shape, np.uint32)
    )
    return [even.view(np.float32), odd.view(np.float32)]


def _float_phases(x: np.ndarray, tag: str):
    x = _packed_rows(x, tag)
    if x.dtype == np.float32:
        return [x]
    if x.dtype == np.uint16:  # bfloat16 bits
        return _bf16_phases(x, tag)
    out = _scratch(tag, x.shape, np.float32)  # float16
    np.copyto(out, x)
    return [out]


def _small_to_f32(x: np.ndarray) -> np.ndarray:
    """Scales/biases (a few per key): any float dtype (bfloat16 as bits) to float32."""
    if x.dtype == np.uint16:
        return np.left_shift(x.astype(np.uint32), np.uint32(16)).view(np.float32)
    return x.astype(np.float32, copy=False)


def _code_phases(codes, scales, biases, bits: int, group_size: int, tag: str):
    """Dequantize one block of mx.quantize codes (…, n, D*bits/32) into 8/bits float32 phases.

    Bytes of the little-endian uint32 words hold consecutive elements, low bits first, so
    phase p of byte i is element (8/bits)*i + p; a group of group_size elements spans
    group_size*bits/8 consecutive bytes, i.e. group_size/P columns of every phase.
    """
    if codes.strides[-1] != codes.itemsize:  # words strided (a transposed buffer): bytes need them packed
        codes = np.ascontiguousarray(codes)
    raw = codes.view(np.uint8)
    phases = 8 // bits
    lead = raw.shape[:-1]
    scale = _small_to_f32(scales)[..., None]
    bias = _small_to_f32(biases)[..., None]
    ng = scales.shape[-1]
    width = group_size // phases
    mask = np.uint8((1 << bits) - 1)
    code = _scratch(tag + "c", raw.shape, np.uint8)
    out = []
    for p in range(phases):
        if phases == 1:
            src = raw
        elif p == phases - 1:
            src = np.right_shift(raw, np.uint8(bits * p), out=code)
        elif p == 0:
            src = np.bitwise_and(raw, mask, out=code)
        else:
            np.right_shift(raw, np.uint8(bits * p), out=code)
            src = np.bitwise_and(code, mask, out=code)
        w = _scratch(tag + str(p), raw.shape, np.float32)
        np.copyto(w, src)
        grouped = w.reshape(*lead, ng, width)
        grouped *= scale  # same affine form as mx.dequantize: scale * code + bias
        grouped += bias
        out.append(w)
    return out


# --- one unit: a block of keys of one (layer, request), every kv head -----------------------


class _Request:
    """Everything one (layer, request) needs, as numpy views, prepared on the calling thread."""

    __slots__ = ("qT", "mask_add", "mask_vis", "lo", "hi", "causal", "L", "G", "H_kv", "D")


def _block_partial(req: _Request, k_block, v_block, s0: int, s1: int):
    """Partial softmax of the keys s0..s1-1: (row max, row sum, unnormalised output).

    Shapes: max and sum (H_kv, M), output (H_kv, M, D), with M = G*L query rows per kv head.
    k_block/v_block are callables returning the float32 phases of the block (widened here, on the
    worker thread, so widening runs in parallel).
    """
    # Keys hidden by the mask may hold NaN/Inf garbage (a documented case): their scores and
    # products are computed and then dropped, so numpy's warnings about them are noise.
    with np.errstate(invalid="ignore", over="ignore"):
        k_phases = k_block()
        # (n, D) x (D, M) is BLAS's fast shape here (q @ K^T is 3x slower); the small (n, M) result
        # is then transposed once so every reduction below runs along the contiguous key axis.
        scores_t = np.matmul(k_phases[0], req.qT[0])  # (H_kv, n, M)
        for p in range(1, len(k_phases)):
            scores_t += np.matmul(k_phases[p], req.qT[p])
        scores = np.ascontiguousarray(scores_t.transpose(0, 2, 1))  # (H_kv, M, n)
        del k_phases, scores_t
        visible = _block_visibility(req, s0, s1)
        if req.mask_add is not None:
            scores += _block_mask(req, req.mask_add, s0, s1)
        if visible is not None:
            scores = np.where(visible, scores, _NEG_INF)
        row_max = scores.max(axis=-1)  # (H_kv, M)
        safe_max = np.where(row_max == _NEG_INF, np.float32(0), row_max)
        scores -= safe_max[..., None]
        np.exp(scores, out=scores)  # hidden keys: exp(-inf) = 0
        row_sum = scores.sum(axis=-1)
        v_phases = v_block()
        M = scores.shape[1]
        out = np.empty((req.H_kv, M, req.D), np.float32)
        P = len(v_phases)
        for p, v in enumerate(v_phases):
            out[..., p::P] = np.matmul(scores, v)
        if not np.isfinite(out).all():
            # NaN/Inf in a value reached the product, maybe as 0 * NaN from a key some row does
            # not see (or whose weight underflowed): redo the block keeping each non-finite value
            # to the rows that weigh it. Clean blocks (nearly all) pay one check of the output.
            for p, v in enumerate(v_phases):
                out[..., p::P] = _weighted_values(scores, v)
        return row_max, row_sum, out


def _weighted_values(weights, values):
    """weights @ values over the keys of non-zero weight only (the reference's weighted_values):
    the finite values through the product, NaN in each column of a row that weighs a non-finite
    value."""
    finite = np.isfinite(values)
    out = np.matmul(weights, np.where(finite, values, np.float32(0)))
    reached = np.matmul((weights != 0).astype(np.float32), (~finite).astype(np.float32))
    return np.where(reached > 0, np.float32(np.nan), out)


def _block_visibility(req: _Request, s0: int, s1: int):
    """Boolean (H_kv|1, M|1, n) of which (query row, key) pairs are visible, or None if all are."""
    visible = None
    if req.causal:
        # Row r sees keys up to hi - L + r (lower-right aligned to the window's end).
        first_limit = req.hi - req.L
        if s1 - 1 > first_limit:
            keys = np.arange(s0, s1).reshape(1, 1, -1)
            rows = np.tile(np.arange(req.L), req.G).reshape(1, -1, 1)
            visible = keys <= first_limit + rows
    if req.mask_vis is not None:
        m = _block_mask(req, req.mask_vis, s0, s1)
        visible = m if visible is None else visible & m
    return visible


def _block_mask(req: _Request, mask: np.ndarray, s0: int, s1: int):
    """mask (H_q|1, L|1, S|1) of one (layer, request) -> (H_kv|1, M|1, n|1) for keys s0..s1-1."""
    Hm, Lm, Sm = mask.shape
    block = mask[:, :, s0:s1] if Sm > 1 else mask
    if Hm == 1 and Lm == 1:
        return block
    block = np.broadcast_to(block, (req.H_kv * req.G, req.L, block.shape[-1]))
    return block.reshape(req.H_kv, req.G * req.L, block.shape[-1])


# --- the driver -------------------------------------------------------------------------------


def _merge(state, partial):
    """Fold one block's partial into the running (max, sum, output); fixed order = exact results."""
    if state is None:
        return partial
    m, s, o = state
    mb, sb, ob = partial
    new = np.maximum(m, mb)
    safe = np.where(new == _NEG_INF, np.float32(0), new)
    # A row max of +inf (an additive +inf mask, or inf data, reached a score) gives inf - inf =
    # NaN here, which is the row's intended result (as the reference's softmax gives): expected.
    # Values past the finite bound (S * max|V| > FLT_MAX, docs/usage.md) overflow to inf: expected.
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.exp(m - safe)
        b = np.exp(mb - safe)
        # A block whose every weight underflows in the merged row (a = 0) is skipped, not
        # multiplied: 0 * NaN would bring back a value the row weighs 0.
        return new, s * a + sb * b, _rescaled(o, a) + _rescaled(ob, b)


def _rescaled(out, factor):
    """out * factor, exactly 0 where factor is 0 (whatever out holds)."""
    factor = factor[..., None]
    return np.where(factor == 0, np.float32(0), out * factor)


def _run(problem: Problem, k_block_of, v_block_of) -> mx.array:
    NL, B, H_q, H_kv, L, S, D = problem.shape
    G = H_q // H_kv
    M = G * L
    q = np.asarray(problem.q.astype(mx.float32)) * np.float32(problem.scale)
    # (NL, B, H_kv, D, M): one (D, M) right-hand side per kv head.
    qT = np.ascontiguousarray(q.reshape(NL, B, H_kv, M, D).transpose(0, 1, 2, 4, 3))
    phases = k_block_of.phases
    q_phases = [np.ascontiguousarray(qT[:, :, :, p::phases, :]) for p in range(phases)]

    mask = problem.mask
    mask_np = None
    if mask.kind == "additive":
        mask_np = np.asarray(mask.array.astype(mx.float32))
    elif mask.kind == "bool":
        mask_np = np.asarray(mask.array)
    if problem.key_ranges is not None:
        ranges = np.asarray(problem.key_ranges).astype(np.int64)
    else:
        ranges = np.tile(np.array([0, S], np.int64), (B, 1))

    windows = []  # (l, b, lo, hi, blocks) per (layer, request)
    for l in range(NL):
        for b in range(B):
            lo = int(ranges[b, 0])
            hi = key_range_end(lo, int(ranges[b, 1]), S)
            # Blocks aligned to absolute key positions, clipped to the request's key window.
            # Keys outside [lo, hi) are never read (causal rows end at hi too).
            blocks, start = [], lo
            while start < hi:
                end = min((start // KEY_BLOCK + 1) * KEY_BLOCK, hi)
                blocks.append((start, end))
                start = end
            windows.append((l, b, lo, hi, blocks))
    workers = threads()
    heads = _head_chunks(H_kv, sum(len(w[4]) for w in windows), workers)

    units = []  # ((l, b, h0, h1), s0, s1), the blocks of one request and head chunk in a row
    requests = {}
    for l, b, lo, hi, blocks in windows:
        per = None
        if mask_np is not None:
            per = mask_np[l if mask_np.shape[0] > 1 else 0, b if mask_np.shape[1] > 1 else 0]
        for h0, h1 in heads:
            req = _Request()
            req.qT = [qp[l, b, h0:h1] for qp in q_phases]
            req.L, req.G, req.H_kv, req.D = L, G, h1 - h0, D
            req.lo, req.hi = lo, hi
            req.causal = mask.kind == "causal"
            req.mask_add = req.mask_vis = None
            if per is not None:
                mine = per[h0 * G : h1 * G] if per.shape[0] > 1 else per
                if mask.kind == "additive":
                    req.mask_add = mine
                    req.mask_vis = mine != _NEG_INF  # NaN and +inf join the score: the row is NaN
                else:
                    req.mask_vis = mine
            requests[(l, b, h0, h1)] = req
            units.extend(((l, b, h0, h1), s0, s1) for s0, s1 in blocks)

    def work(unit):
        key, s0, s1 = unit
        l, b, h0, h1 = key
        return _block_partial(
            requests[key],
            lambda: k_block_of(l, b, h0, h1, s0, s1),
            lambda: v_block_of(l, b, h0, h1, s0, s1),
            s0,
            s1,
        )

    out = np.zeros((NL, B, H_kv, M, D), np.float32)
    state, current = None, None
    with single_threaded_blas():
        for unit, partial in zip(units, ordered(work, units, workers)):
            if unit[0] != current:
                if state is not None:
                    _finish(out, current, state)
                state, current = None, unit[0]
            state = _merge(state, partial)
    if state is not None:
        _finish(out, current, state)
    result = mx.array(out.reshape(NL, B, H_kv, G, L, D).reshape(NL, B, H_q, L, D))
    return result.astype(problem.q.dtype)


def _head_chunks(H_kv: int, block_units: int, workers: int):
    """kv heads split into near-equal chunks, so that a call has at least UNITS_PER_WORKER units
    per worker. Goal: no worker idle when a call has fewer key blocks than workers. Example: B = 1,
    S = 1024, H_kv = 8, 2 workers: one block -> 2 chunks of 4 heads. Rule: chunks = min(H_kv,
    ceil(UNITS_PER_WORKER * workers / block_units)). More units than workers measured slower
    (each unit's Python glue contends for the GIL; docs/decisions/cpu-one-level-of-threads.md).
    Heads never meet in the arithmetic, so the split changes no bit of the result."""
    if workers == 1 or block_units == 0:
        return [(0, H_kv)]
    chunks = min(H_kv, -(-UNITS_PER_WORKER * workers // block_units))
    edges = [H_kv * i // chunks for i in range(chunks + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _finish(out, key, state):
    l, b, h0, h1 = key
    _, row_sum, acc = state
    seen = row_sum != 0  # NaN stays NaN: data that reached a score is never hidden as zeros
    denom = np.where(seen, row_sum, np.float32(1))[..., None]
    out[l, b, h0:h1] = np.where(seen[..., None], acc / denom, np.float32(0))


class _PlainBlocks:
    def __init__(self, x: mx.array, tag: str):
        self.tag = tag
        self.view = _numpy_view(x)
        self.phases = 2 if x.dtype == mx.bfloat16 else 1

    def __call__(self, l, b, h0, h1, s0, s1):
        return _float_phases(self.view[l, b, h0:h1, s0:s1, :], self.tag)


class _QuantizedBlocks:
    def __init__(self, kv: QuantizedKV, bits: int, group_size: int, tag: str):
        self.tag = tag
        self.codes = np.asarray(kv.codes)
        self.scales = _numpy_view(kv.scales)
        self.biases = _numpy_view(kv.biases)
        self.bits, self.group_size = bits, group_size
        self.phases = 8 // bits

    def __call__(self, l, b, h0, h1, s0, s1):
        return _code_phases(
            self.codes[l, b, h0:h1, s0:s1, :],
            self.scales[l, b, h0:h1, s0:s1, :],
            self.biases[l, b, h0:h1, s0:s1, :],
            self.bits,
            self.group_size,
            self.tag,
        )


def _evaluated(*arrays):
    mx.eval(*[a for a in arrays if a is not None])


def decode_attention(problem: Problem) -> mx.array:
    problem = problem.with_layer_axis()
    _evaluated(problem.q, problem.k, problem.v, problem.mask.array, problem.key_ranges)
    return _run(problem, _PlainBlocks(problem.k, "k"), _PlainBlocks(problem.v, "v"))


def quantized_decode_attention(problem: Problem) -> mx.array:
    problem = problem.with_layer_axis()
    k, v = problem.k, problem.v
    _evaluated(problem.q, *k, *v, problem.mask.array, problem.key_ranges)
    return _run(
        problem,
        _QuantizedBlocks(k, problem.bits, problem.group_size, "k"),
        _QuantizedBlocks(v, problem.bits, problem.group_size, "v"),
    )
