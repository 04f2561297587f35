"""ci/gpu/kernel_gaps.py's reading of a trace: a made-up sample of kernels, overlapping and apart."""
import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("kernel_gaps", Path(__file__).resolve().parents[1] / "ci/gpu/kernel_gaps.py")
kernel_gaps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_gaps)


def test_lead_busy_gaps_and_tail_per_call():
    # a sample of 2 calls from 0 to 100 us: kernels at 10-30 and 25-40 (overlapping), 50-60, 70-90
    kernels = [("fa_decode", 10, 20), ("fa_merge", 25, 15), ("fa_decode", 50, 10), ("fa_merge", 70, 20),
               ("before", -5, 3), ("after", 100, 5)]
    row = kernel_gaps.sample_summary((0, 100), kernels, inner=2, build_end=4)
    assert row == {"wall_us": 50.0, "build_us": 2.0, "lead_us": 5.0, "busy_us": 30.0, "gaps_us": 10.0, "largest_gap_us": 10.0,
                   "tail_us": 5.0, "kernels": 4}


def test_a_sample_without_kernels():
    assert kernel_gaps.sample_summary((0, 40), [("k", 50, 1)], inner=4) == {"wall_us": 10.0, "kernels": 0}


def test_trace_events_keeps_samples_and_kernels_only(tmp_path):
    events = [{"name": "sample", "ph": "X", "cat": "user_annotation", "ts": 100, "dur": 50},
              {"name": "sample", "ph": "X", "cat": "gpu_user_annotation", "ts": 101, "dur": 40},
              {"name": "custom_kernel_fa_x", "ph": "X", "cat": "kernel", "ts": 110, "dur": 7},
              {"name": "cudaLaunchKernel", "ph": "X", "cat": "cuda_runtime", "ts": 105, "dur": 2},
              {"name": "sample", "ph": "X", "cat": "user_annotation", "ts": 0, "dur": 50}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ranges, kernels = kernel_gaps.trace_events(path)
    assert ranges == {"sample": [(0, 50), (100, 150)], "build": []}
    assert kernels == [("custom_kernel_fa_x", 110, 7)]


def test_profiled_events_reads_what_the_profiler_exports():
    """profiled_events (main's reading of a run; profiled_kernels', for scalar_pool.py and
    small_grid_bandwidth.py) hands the exported trace to trace_events, with the range names asked for."""
    events = [{"name": "build", "ph": "X", "cat": "user_annotation", "ts": 5, "dur": 3},
              {"name": "custom_kernel_fa_x", "ph": "X", "cat": "kernel", "ts": 10, "dur": 7}]

    class Profiler:
        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                json.dump({"traceEvents": events}, f)

    assert kernel_gaps.profiled_events(Profiler()) == ({"sample": [], "build": [(5, 8)]},
                                                      [("custom_kernel_fa_x", 10, 7)])
    assert kernel_gaps.profiled_events(Profiler(), ()) == ({}, [("custom_kernel_fa_x", 10, 7)])


@pytest.mark.parametrize("inner", [1, 20])
def test_busy_and_gaps_fill_the_span(inner):
    kernels = [("k", 3 * i, 2) for i in range(10)]  # 2 us kernels 1 us apart
    row = kernel_gaps.sample_summary((0, 40), kernels, inner)
    assert row["busy_us"] * inner == 20 and row["gaps_us"] * inner == 9 and row["largest_gap_us"] == 1
    assert (row["lead_us"] + row["busy_us"] + row["gaps_us"] + row["tail_us"]) * inner == 40
