"""Deliberately broken implementations, to show that every property can fail.

As a script, runs the suites once per mutant against the (patched) reference backend and
prints which test files fail:

    python -m tests.mutants                     # every mutant, HYPOTHESIS_PROFILE=dev
    python -m tests.mutants gqa_mod scale_off   # some of them
    python -m tests.mutants --list

As a pytest plugin (`-p tests.mutants`, what the script does) it reads FUSEDATTEND_MUTANT and
replaces fusedattend.reference's two entry points in that pytest process (and in xdist
workers, which load the same plugin) with `mutant_attention`, a small independent
implementation with one knob turned. Nothing on disk changes: the package is never broken.
`none` turns no knob and must pass everything (the harness itself is sound).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import mlx.core as mx

MUTANTS = {
    "none": "no mutation: the independent re-implementation itself (must pass)",
    "gqa_mod": "GQA mapping h -> h % H_kv instead of h // (H_q // H_kv)",
    "causal_off_by_one": "causal row i sees j < S_end - L + i (the diagonal is hidden)",
    "batch_dependent": "B > 1 splits S in two halves merged online-softmax style, B = 1 does not "
    "(a split-K count chosen from the batch size)",
    "nondeterministic": "every other call splits S in two halves (run-to-run varying reduction order)",
    "mask_ignored": "array masks (bool and additive) are ignored",
    "scale_off": "scores use 1.01 x scale",
    "dequant_group_shift": "quantized: each group uses the previous group's scale/bias (off by one group)",
    "nan_leak": "weights x V as a plain product: 0 x NaN garbage of hidden values leaks into the output",
    "group_zeroing": "only values no row of the head sees are zeroed: rows that do not see a value "
    "other rows see (causal L > 1, per-row masks) or weigh it 0 take 0 x NaN",
    "masked_row_mean": "a row that sees no key returns the mean of V (MLX's behaviour) instead of zeros",
    "nan_zeroed": "a row whose visible scores hold NaN gives zeros (as if it saw no key) instead of NaN",
}
ENV = "FUSEDATTEND_MUTANT"


def _visible(problem, m):
    NL, B, H_q, H_kv, L, S, D = problem.shape
    j = mx.arange(S)
    vis = mx.ones((1, 1, 1, 1, S), dtype=mx.bool_)
    end = mx.full((1, B, 1, 1, 1), S)
    if problem.key_ranges is not None:
        start = problem.key_ranges[:, 0].reshape(1, B, 1, 1, 1)
        second = problem.key_ranges[:, 1].reshape(1, B, 1, 1, 1)
        end = mx.where(second >= 0, start + second, S + 1 + second)  # negative: S + 1 + it
        vis = vis & (j >= start) & (j < end)
    kind = problem.mask.kind
    if kind == "causal":
        lim = end - L + mx.arange(L).reshape(L, 1)
        vis = vis & ((j < lim) if m == "causal_off_by_one" else (j <= lim))
    elif kind in ("bool", "additive") and m != "mask_ignored":
        arr = problem.mask.array
        vis = vis & (arr if kind == "bool" else arr != -mx.inf)
    return mx.broadcast_to(vis, (NL, B, H_q, L, S))


_CALLS = [0]


def _partial(scores, v, m):
    """(row max, sum of weights, unnormalised weights x V) of one key block."""
    raw = mx.max(scores, axis=-1, keepdims=True)
    w = mx.exp(scores - mx.where(raw == -mx.inf, 0.0, raw))
    return raw, mx.sum(w, axis=-1, keepdims=True), (w @ v if m in ("nan_leak", "group_zeroing") else _skipping(w, v))


def _skipping(w, v):
    """w @ v without the terms of weight 0: finite values by the product, then each row that
    weighs a NaN (or both infinities) is NaN, one that weighs +inf or -inf that infinity."""
    ok = mx.isfinite(v)
    out = w @ mx.where(ok, v, 0.0)
    weighs = (w != 0).astype(mx.float32)
    count = [(weighs @ f(v).astype(mx.float32)) > 0 for f in (mx.isnan, mx.isposinf, mx.isneginf)]
    nan, pos, neg = count[0] | (count[1] & count[2]), count[1], count[2]
    return mx.where(nan, mx.nan, mx.where(pos, mx.inf, mx.where(neg, -mx.inf, out)))


def mutant_attention(problem, keys, values, m):
    NL, B, H_q, H_kv, L, S, D = problem.shape
    G = H_q // H_kv
    heads = mx.arange(H_q) % H_kv if m == "gqa_mod" else mx.arange(H_q) // G
    k = mx.take(keys.astype(mx.float32), heads, axis=2)  # (NL,B,H_q,S,D)
    v = mx.take(values.astype(mx.float32), heads, axis=2)
    scale = problem.scale * (1.01 if m == "scale_off" else 1.0)
    q = problem.q.astype(mx.float32) * scale
    scores = q @ k.swapaxes(-1, -2)  # (NL,B,H_q,L,S)
    if problem.mask.kind == "additive" and m != "mask_ignored":
        scores = scores + problem.mask.array.astype(mx.float32)
    vis = _visible(problem, m)
    scores = mx.where(vis, scores, -mx.inf)
    if m == "group_zeroing":
        v = mx.where(mx.expand_dims(mx.any(vis, axis=-2), -1), v, 0.0)
    _CALLS[0] += 1
    split = (m == "batch_dependent" and B > 1) or (m == "nondeterministic" and _CALLS[0] % 2)
    if split and S > 1:
        h = S // 2
        parts = [_partial(scores[..., :h], v[..., :h, :], m), _partial(scores[..., h:], v[..., h:, :], m)]
        top = mx.maximum(parts[0][0], parts[1][0])
        top = mx.where(top == -mx.inf, 0.0, top)
        num = den = 0.0
        for pm, pd, pn in parts:
            f = mx.where(pm == -mx.inf, 0.0, mx.exp(pm - top))
            den, num = den + pd * f, num + mx.where(f == 0, 0.0, pn * f)  # a block weighed 0 is skipped
    else:
        _, den, num = _partial(scores, v, m)
    seen = (den > 0) if m == "nan_zeroed" else (den != 0)
    out = mx.where(seen, num / mx.where(seen, den, 1.0), 0.0)
    if m == "masked_row_mean":
        out = mx.where(seen, out, mx.mean(v, axis=-2, keepdims=True))
    return out.astype(problem.q.dtype)


def _dequantize(kv, bits, group_size, m):
    scales, biases = kv.scales.astype(mx.float32), kv.biases.astype(mx.float32)
    if m == "dequant_group_shift":
        scales, biases = mx.roll(scales, 1, axis=-1), mx.roll(biases, 1, axis=-1)
    return mx.dequantize(kv.codes, scales, biases, group_size=group_size, bits=bits)


def install(m, setattr=setattr):
    """Patch fusedattend.reference in this process (only in memory); `setattr`: how (a test
    passes pytest's monkeypatch.setattr, which undoes it)."""
    if m not in MUTANTS:
        raise SystemExit(f"unknown mutant {m!r}; known: {', '.join(MUTANTS)}")
    from fusedattend import reference

    def plain(p):
        p = p.with_layer_axis()
        return mutant_attention(p, p.k, p.v, m)

    def quantized(p):
        p = p.with_layer_axis()
        return mutant_attention(p, _dequantize(p.k, p.bits, p.group_size, m), _dequantize(p.v, p.bits, p.group_size, m), m)

    setattr(reference, "decode_attention", plain)
    setattr(reference, "quantized_decode_attention", quantized)


# ---------------------------------------------------------------------------- pytest plugin


def pytest_configure(config):
    m = os.environ.get(ENV)
    if m:
        install(m)


def pytest_report_header(config):
    m = os.environ.get(ENV)
    return f"fusedattend MUTANT: {m} ({MUTANTS.get(m)})" if m else None


# ---------------------------------------------------------------------------- script

SUITES = ["tests/property", "tests/parity", "tests/unit/test_api.py"]


def run_one(m, extra=()):
    env = dict(os.environ, **{ENV: m})
    env.setdefault("HYPOTHESIS_PROFILE", "dev")
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.mutants", *SUITES, "--backend", "reference",
           "-q", "--tb=no", "-rf", "-n", "2", "-p", "no:cacheprovider", *extra]
    t = time.time()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+?)::(\S+?)(?:\[| |$)", res.stdout, flags=re.M)
    summary = (res.stdout.strip().splitlines() or ["(no output)"])[-1]
    return failed, summary, time.time() - t


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list" in argv:
        for k, d in MUTANTS.items():
            print(f"{k:22s} {d}")
        return 0
    chosen = [a for a in argv if not a.startswith("-")] or list(MUTANTS)
    ok = True
    for m in chosen:
        failed, summary, secs = run_one(m)
        files = {}
        for f, t in failed:
            files.setdefault(f, set()).add(t)
        print(f"== {m}: {MUTANTS[m]}\n   {summary}  ({secs:.0f}s)")
        for f, tests in sorted(files.items()):
            print(f"   FAILS {f}: {', '.join(sorted(tests))}")
        if (m == "none") == bool(failed):
            ok = False
            print("   !! " + ("baseline fails" if m == "none" else "mutant SURVIVED: no test failed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
