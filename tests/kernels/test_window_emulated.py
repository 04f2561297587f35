"""windowed_decode_attention's GPU form (fusedattend/window_gpu.py: a split launch over the
quantized keys, one over the window, one merge of both) with the real kernels run on the CPU
(tests/kernels/cpu_emulator.py): against float64 attention, and a request's bits in any batch."""

import mlx.core as mx
import numpy as np
import pytest

import fusedattend as fa
from fusedattend import window_gpu
from fusedattend.conformance.grids import np_of
from tests.kernels.cpu_emulator import compiler_available, emulated_gpu
from tests.parity.test_window_attention import TOLERANCE, _inputs, _oracle

pytestmark = pytest.mark.skipif(not compiler_available(), reason="g++ not installed here")


def launches(monkeypatch):
    """How many times the split-and-merge path ran (not the gathered fallback)."""
    ran = []
    real = window_gpu.plan

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        ran.append(out is not None)
        return out

    monkeypatch.setattr(window_gpu, "plan", spy)
    return ran


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32], ids=["bfloat16", "float32"])
def test_against_float64_attention(dtype, monkeypatch):
    """Requests of 290 quantized keys (two 256-key blocks) and of none, windows of 9 and 3 keys,
    L = 2 causal: every row sees all its quantized keys, so the split path takes it."""
    qr, wr = [(0, 290), (0, 0)], [(0, 9), (0, 3)]
    q, K, V, kw, vw = _inputs(2, 300, 16, 2, dtype, 4, seed=11)
    ran = launches(monkeypatch)
    with emulated_gpu():
        out = fa.windowed_decode_attention(q, K, V, kw, vw, key_ranges=fa.KeyRanges(qr),
                                           window_ranges=fa.KeyRanges(wr), mask="causal", backend="cuda")
    assert ran == [True]
    expected = _oracle(q, K, V, kw, vw, qr, wr, 4, causal=True)
    err = np.abs(np_of(out) - expected).max()
    assert err <= TOLERANCE[dtype] * max(1.0, np.abs(expected).max()), f"off by {err:.3g}"


@pytest.mark.parametrize("window_block", [256, 1024])
def test_a_request_alone_and_in_a_batch_of_longer_buffers(window_block):
    """Blocks of a fixed Policy.window_block keys: a request's output is bit for bit the same
    beside a request whose quantized buffer is 30 times as long, whose S alone would take longer
    blocks (its own blocks are the same; the batch's extra blocks hold none of its keys)."""
    from tests.kernels.policy_override import policy_override

    q, K, V, kw, vw = _inputs(2, 9000, 16, 1, mx.bfloat16, 4, seed=12)
    with emulated_gpu(), policy_override(window_block=window_block):
        batch = fa.windowed_decode_attention(q, K, V, kw, vw, key_ranges=fa.KeyRanges([(0, 290), (0, 9000)]),
                                             window_ranges=fa.KeyRanges([(0, 5), (0, 16)]), backend="cuda")
        alone = fa.windowed_decode_attention(q[:1], [x[:1, :, :300] for x in K], [x[:1, :, :300] for x in V],
                                             kw[:1], vw[:1], key_ranges=fa.KeyRanges([(0, 290)]),
                                             window_ranges=fa.KeyRanges([(0, 5)]), backend="cuda")
    assert mx.array_equal(batch[:1], alone)


def test_causal_rows_into_the_quantized_keys_take_the_gathered_path(monkeypatch):
    """L = 4 over a window of 2 keys: the first rows' causal limit falls among the quantized keys,
    which the quantized launch cannot see; the gathered path answers, and rightly."""
    q, K, V, kw, vw = _inputs(1, 40, 8, 4, mx.float32, 4, seed=13)
    ran = launches(monkeypatch)
    with emulated_gpu():
        out = fa.windowed_decode_attention(q, K, V, kw, vw, window_ranges=fa.KeyRanges([(0, 2)]), mask="causal",
                                           backend="cuda")
    assert ran == [False]
    expected = _oracle(q, K, V, kw, vw, [(0, 40)], [(0, 2)], 4, causal=True)
    assert np.abs(np_of(out) - expected).max() <= TOLERANCE[mx.float32] * max(1.0, np.abs(expected).max())


def test_repeated_steps_reuse_their_launch_set_up(monkeypatch):
    """A decode loop's calls (its window one key longer a step) set their launches up once a
    block count, and give the bits a fresh set-up gives."""
    from fusedattend.gpu import launch

    setups = []
    common = launch._launch_common
    monkeypatch.setattr(launch, "_launch_common", lambda *a, **k: setups.append(1) or common(*a, **k))
    monkeypatch.setattr(window_gpu, "_LAUNCHES", {})
    q, K, V, kw, vw = _inputs(1, 40, 12, 1, mx.bfloat16, 4, seed=14)
    with emulated_gpu():
        outs = [fa.windowed_decode_attention(q, K, V, kw[:, :, :n], vw[:, :, :n], backend="cuda") for n in (9, 10, 11)]
        assert len(setups) == 2  # the quantized launch and the window's, once
        window_gpu._LAUNCHES.clear()
        fresh = fa.windowed_decode_attention(q, K, V, kw[:, :, :11], vw[:, :, :11], backend="cuda")
    assert mx.array_equal(outs[2], fresh) and not mx.array_equal(outs[0], outs[2])


def test_one_merge_of_both_launches_gives_the_bits_of_their_blocks_joined():
    """merge_partials.metal over two launches' blocks (FA_MERGE_WINDOW) against the blocks joined
    by a concatenation and merged by the one-launch form: 31 quantized blocks then 2 of the
    window, so the merge's second pass of 32 lanes starts inside the window's blocks."""
    from fusedattend._problem import NO_MASK, quantized_problem
    from fusedattend.gpu import schedule
    from fusedattend.window_attention import _window_problem

    q, K, V, kw, vw = _inputs(2, 31 * 256, 300, 1, mx.float32, 4, seed=15)
    window = _window_problem(q, kw, vw, None, None)._replace(mask=NO_MASK)
    quantized = quantized_problem(q, K, V, None, None, None, 4, 64)._replace(mask=NO_MASK)
    policy = window_gpu._policy(schedule.current_policy())
    with emulated_gpu():
        window_partials, merged = window_gpu._split(window, False, policy)
        out_w, stats_w = window_partials(*window.arrays)
        out_q, stats_q = window_gpu._split(quantized, True, policy)[0](*quantized.arrays)
        assert (stats_q.shape[3], stats_w.shape[3]) == (31, 2)
        joined = merged(mx.concatenate([out_q, out_w], axis=3), mx.concatenate([stats_q, stats_w], axis=3))
        one_merge = merged(out_q, stats_q, out_w, stats_w)
        public = fa.windowed_decode_attention(q, K, V, kw, vw, backend="cuda")
    assert mx.array_equal(one_merge, joined) and mx.array_equal(public, joined)
    expected = _oracle(q, K, V, kw, vw, [(0, 31 * 256)] * 2, [(0, 300)] * 2, 4, causal=False)
    assert np.abs(np_of(public) - expected).max() <= TOLERANCE[mx.float32] * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("prompt, plans, quantized", [(400, 2, 150), (20, 1, 0)], ids=["quantized", "window_only"])
def test_a_decode_loop_through_plans_gives_the_checked_calls_bits(monkeypatch, prompt, plans, quantized):
    """QuantizedWindowCache's decode steps launch through plans (windowed_decode_plan), one for
    each set of shapes, paddings and window blocks: the bits of a full, checked call at every
    step, across the window's growth from one 256-key block to two (a prompt of 400: 150 tokens
    quantized, 250 in the window), and with no quantized token (a prompt of 20)."""
    from fusedattend import window_cache
    from fusedattend.window_cache import QuantizedWindowCache

    made = []
    real = window_cache.windowed_decode_plan
    monkeypatch.setattr(window_cache, "windowed_decode_plan", lambda *a, **k: made.append(1) or real(*a, **k))
    monkeypatch.setattr(window_cache, "_PLANS", {})
    B, H_kv, D = 2, 1, 64
    keys = mx.random.normal((B, H_kv, prompt + 12, D), key=mx.random.key(16))
    values = mx.random.normal((B, H_kv, prompt + 12, D), key=mx.random.key(17))
    cache = QuantizedWindowCache(window=150)
    cache.update_and_fetch(keys[:, :, :prompt], values[:, :, :prompt])
    with emulated_gpu():
        for t in range(prompt, prompt + 12):
            cache.update_and_fetch(keys[:, :, t:t + 1], values[:, :, t:t + 1])
            q = mx.random.normal((B, 4, 1, D), key=mx.random.key(t))
            planned = cache.attend(q, D**-0.5, backend="cuda")
            w, ranges = max(cache.window_lengths), None
            if quantized:
                capacity = cache._kq[0].shape[2]
                ranges = fa.KeyRanges.from_padding(right=[capacity - n for n in cache.quantized_lengths])
            checked = fa.windowed_decode_attention(q, cache._kq, cache._vq, cache._wk[:, :, :w], cache._wv[:, :, :w],
                                                   scale=D**-0.5, key_ranges=ranges, backend="cuda")
            assert mx.array_equal(planned, checked), t
    assert cache.quantized_lengths == [quantized] * B and cache.window_lengths == [prompt + 12 - quantized] * B
    assert len(made) == plans  # 400: the window in one block (251 .. 256 keys), then in two


@pytest.mark.parametrize("window_block", [256, 512])
def test_tunes_window_check_passes_the_kernels(window_block):
    """python -m fusedattend tune's check of the window format (requests of their own lengths
    alone and in a batch, the oracle's tolerance), at S around the policy's window_block."""
    import dataclasses

    from fusedattend import tune
    from fusedattend.gpu import schedule

    lines = []
    with emulated_gpu():
        policy = dataclasses.replace(schedule.Policy(), window_block=window_block)
        assert tune.check_policy(policy, "cuda", formats=(tune.WINDOW_FORMAT,), log=lines.append)
    assert len(lines) == 4 and all("batch == requests alone: True" in line for line in lines)
    assert f"S={window_block + 3:6d}" in "".join(lines)
