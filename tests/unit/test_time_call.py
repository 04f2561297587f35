"""bench.time_call queues no more calls a sample than fit in the GPU's memory together, and
bench.release_memory empties MLX's (and torch's) caches between shapes."""

import sys

import mlx.core as mx

from fusedattend.benchmarks import harness as bench

MB = 1 << 20


def test_calls_that_fit():
    assert bench.calls_that_fit(10, 5, 100, share=0.75) == 7  # (75 - 5) // 10
    assert bench.calls_that_fit(4300 * MB, 1200 * MB, 81559 * MB) == 13  # dequant+sdpa, H100
    assert bench.calls_that_fit(10, 200, 100) == 1  # never less than one
    assert bench.calls_that_fit(10, 5, None) is None  # a CPU: no limit
    assert bench.calls_that_fit(0, 5, 100) is None  # nothing measured: no limit


def _big_transient():  # 16 MB that lives only inside the call
    return (mx.ones((4 * MB,)) + 1).sum()


def test_time_call_queues_what_fits(monkeypatch):
    room = 40 * MB
    monkeypatch.setattr(bench, "_gpu_memory_bytes",
                        lambda: (mx.get_active_memory() + room) / bench.QUEUED_MEMORY_SHARE)
    samples = bench.time_call(_big_transient, repeats=2, inner=8)
    assert 1 <= samples.inner <= 2 and len(samples) == 2


def test_time_call_queues_all_without_a_memory_size(monkeypatch):
    monkeypatch.setattr(bench, "_gpu_memory_bytes", lambda: None)
    samples = bench.time_call(_big_transient, repeats=2, inner=8)
    assert samples.inner == 8


def test_release_memory_empties_both_caches(monkeypatch):
    emptied = []
    cuda = type("cuda", (), {"is_available": staticmethod(lambda: True),
                             "empty_cache": staticmethod(lambda: emptied.append(True))})
    monkeypatch.setitem(sys.modules, "torch", type("torch", (), {"cuda": cuda}))
    mx.eval(_big_transient())
    bench.release_memory()
    assert emptied == [True] and mx.get_cache_memory() == 0


def test_release_memory_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    bench.release_memory()
    assert mx.get_cache_memory() == 0
