"""Decode-loop benchmarks time every implementation on the same sequence of cache lengths.

bench.growing_loop gives each implementation a loop of its own; tests/perf's loop rows time ours
and MLX's SDPA with it. Until 2026-12-02 one counter ran on through both, so the peer, timed
after ours, read longer caches than ours did; these tests fail on that form.
"""
import mlx.core as mx
import pytest

import fusedattend as fa
from fusedattend.benchmarks import harness as bench
from fusedattend.gpu import schedule
from tests.perf import test_decode_perf as perf

DEFAULT = schedule.Policy()  # the shipped schedule


def recording_step(seen):
    def step(x, keys):
        seen.append(keys)
        return x + 1
    return step


def test_each_loop_has_its_own_sequence_of_lengths():
    ours, peer = [], []
    run_ours = bench.growing_loop(recording_step(ours), mx.array(0), 100, 3, 5)
    run_peer = bench.growing_loop(recording_step(peer), mx.array(0), 100, 3, 5)
    assert run_ours().item() == 3  # chained: each step's output is the next step's query
    run_ours()
    run_peer()
    run_peer()
    assert ours == peer == [100, 101, 102, 103, 104, 100]  # one key longer a step, back to S after `room`


class RecordingBenchmark:
    """pytest-benchmark's fixture as under xdist: pedantic runs the rounds, no stats kept."""
    stats = None

    def __init__(self):
        self.extra_info = {}

    def pedantic(self, fn, rounds, iterations, warmup_rounds):
        for _ in range(warmup_rounds + rounds * iterations):
            fn()


@pytest.mark.parametrize("pads", [None, [0, 3]])
def test_perf_loop_times_the_peer_on_ours_lengths(monkeypatch, pads):
    """tests/perf's decode-loop rows: the peer's loop reads the lengths ours read, round by round."""
    lengths = {"ours": [], "mx.fast.sdpa": []}

    def ours(q, k, v, **kwargs):
        lengths["ours"].append(k.shape[2])
        return q

    def sdpa(q, k, v, **kwargs):
        lengths["mx.fast.sdpa"].append(k.shape[2])
        return q

    monkeypatch.setattr(perf, "ON_GPU", True)
    monkeypatch.setattr(fa, "decode_attention", ours)
    monkeypatch.setattr(mx.fast, "scaled_dot_product_attention", sdpa)
    benchmark = RecordingBenchmark()
    perf.run_loop(benchmark, "cuda", 2, 16, "bfloat16", pads=pads)
    timed = perf.QUEUED_CALLS * (perf.ROUNDS + 1)  # a warm-up round, then ROUNDS
    want = [16 + i for i in range(timed)]
    # ours: pytest-benchmark's rounds, then (no stats under xdist) the same protocol once more
    assert lengths["ours"] == want + want
    assert lengths["mx.fast.sdpa"] == want
    assert benchmark.extra_info["ratio_mx.fast.sdpa"] > 0


@pytest.mark.parametrize("each_step", [False, True])
def test_perf_loop_evaluates_each_step_where_asked(monkeypatch, each_step):
    """tests/perf's loop rows with every step evaluated evaluate each step (ours and the peer's)
    before the next; the others queue a round's steps."""
    events = []

    def stepping(name):
        def step(q, k, v, **kwargs):
            events.append(name)
            return q + 1
        return step

    evaluate = mx.eval
    monkeypatch.setattr(perf, "ON_GPU", True)
    monkeypatch.setattr(perf, "QUEUED_CALLS", 3)  # the CPU's 1 would evaluate each step anyway
    monkeypatch.setattr(fa, "decode_attention", stepping("ours"))
    monkeypatch.setattr(mx.fast, "scaled_dot_product_attention", stepping("mx.fast.sdpa"))
    monkeypatch.setattr(mx, "eval", lambda *arrays: events.append("eval") or evaluate(*arrays))
    perf.run_loop(RecordingBenchmark(), "cuda", 2, 64, "bfloat16", each_step=each_step)
    steps = [i for i, e in enumerate(events) if e != "eval"]
    assert {events[i] for i in steps} == {"ours", "mx.fast.sdpa"}
    followed = [events[i + 1] == "eval" for i in steps]
    assert all(followed) if each_step else followed.count(True) * perf.QUEUED_CALLS == len(steps)


def test_short_perf_loops_take_one_launch_every_step():
    """The S = 64 loop rows time single launches only (DEFAULT.single_pass_max_s): their cache grows
    to SHORT_LOOP_END - 1 keys, then starts over."""
    from fusedattend import gpu

    for B, S in perf.LOOP_SHAPES + perf.EACH_STEP_SHAPES:
        if S < perf.SHORT_LOOP_END:
            assert S + perf.loop_room(S) - 1 <= DEFAULT.single_pass_max_s
            seen = []
            run = bench.growing_loop(recording_step(seen), mx.zeros(1), S, 7, perf.loop_room(S))
            for _ in range(100):
                run()
            assert max(seen) == perf.SHORT_LOOP_END - 1 and min(seen) == S


def test_padded_mask_stands_for_the_padded_key_ranges():
    """The padded loops' peer (MLX's SDPA with bench.padded_mask) sees the keys ours sees."""
    pads = bench.left_pads(16)
    S = max(pads) + 3
    ranges = bench.padded_key_ranges(pads).pairs_for(S)
    assert bench.padded_key_range_array(pads, S).tolist() == [list(pair) for pair in ranges]
    mask = bench.padded_mask(pads, S)
    assert mask.shape == (16, 1, 1, S)
    want = [[start <= j < start + length for j in range(S)] for start, length in ranges]
    assert mask[:, 0, 0, :].tolist() == want
