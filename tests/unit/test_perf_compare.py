"""fusedattend.benchmarks.perf_compare (ci/perf.sh compare): per-call medians, the host-bound rows' wider limit, the peer as a gauge, the newest
baseline."""

import json
import subprocess
import sys



def write_run(path, rows):
    """rows: name -> (median seconds a round, calls_per_round or None for an old baseline[, more
    extra_info, e.g. a peer's ratio])."""
    benchmarks = []
    for name, (median, calls, *more) in rows.items():
        extra = {} if calls is None else {"calls_per_round": calls}
        extra.update(*more)
        benchmarks.append({"name": name, "stats": {"median": median}, "extra_info": extra})
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    return path


def run(*args):
    result = subprocess.run([sys.executable, "-m", "fusedattend.benchmarks.perf_compare", *map(str, args)],
                            capture_output=True, text=True)
    return result.returncode, result.stdout


def test_a_slower_row_fails_and_a_level_one_passes(tmp_path):
    base = write_run(tmp_path / "base.json", {"a": (20e-3, 20), "b": (20e-3, 20)})
    level = write_run(tmp_path / "level.json", {"a": (21e-3, 20), "b": (24e-3, 20)})
    slower = write_run(tmp_path / "slower.json", {"a": (21e-3, 20), "b": (26e-3, 20)})
    assert run(base, level, "--fail", "25%")[0] == 0
    code, out = run(base, slower, "--fail", "25%")
    assert code == 1 and "b: 1000.0 -> 1300.0 us a call, 1.30x (limit 1.25x) FAIL" in out


def test_medians_are_per_call(tmp_path):
    # An old baseline timed one call a round; a run of 20 queued calls at the same speed is level.
    base = write_run(tmp_path / "base.json", {"a": (1e-3, None)})
    queued = write_run(tmp_path / "queued.json", {"a": (20e-3, 20)})
    code, out = run(base, queued)
    assert code == 0 and "1.00x" in out


def test_host_bound_rows_get_their_own_limit(tmp_path):
    # 40 us a call in the baseline: host-bound under a 75 us line; 1000 us: not.
    base = write_run(tmp_path / "base.json", {"small": (0.8e-3, 20), "large": (20e-3, 20)})
    small_noisy = write_run(tmp_path / "r1.json", {"small": (1.2e-3, 20), "large": (20e-3, 20)})
    small_much_slower = write_run(tmp_path / "r2.json", {"small": (1.4e-3, 20), "large": (20e-3, 20)})
    large_slower = write_run(tmp_path / "r3.json", {"small": (0.8e-3, 20), "large": (26e-3, 20)})
    limits = ["--fail", "25", "--host-bound-fail", "60", "--host-bound-us", "75"]
    code, out = run(base, small_noisy, *limits)
    assert code == 0 and "(limit 1.60x, host-bound) ok" in out
    assert run(base, small_much_slower, *limits)[0] == 1
    assert run(base, large_slower, *limits)[0] == 1
    # Without the host-bound line every row has the one limit.
    assert run(base, small_noisy, "--fail", "25")[0] == 1


def test_the_newest_baseline_of_a_folder_is_the_reference(tmp_path):
    storage = tmp_path / "nvidia-x" / "Linux-CPython-3.12-64bit"
    storage.mkdir(parents=True)
    write_run(storage / "0009_nvidia-x.json", {"a": (1e-3, 1)})
    write_run(storage / "0010_nvidia-x.json", {"a": (2e-3, 1)})
    run_json = write_run(tmp_path / "run.json", {"a": (2.1e-3, 1)})
    code, out = run(storage.parent, run_json)
    assert code == 0 and "0010_nvidia-x.json" in out


def test_no_row_in_common_fails(tmp_path):
    base = write_run(tmp_path / "base.json", {"a": (1e-3, 1)})
    other = write_run(tmp_path / "other.json", {"b": (1e-3, 1)})
    code, out = run(base, other)
    assert code == 1 and "a: not run" in out and "b: no baseline" in out


def test_a_row_slow_with_its_peer_is_the_machine_not_a_regression(tmp_path):
    # The peer timed beside a row in the same run is its gauge: 1.5x slower with MLX's SDPA 1.5x
    # slower too (its ratio, peer time / ours, unchanged) passes; with the peer level it fails.
    peer = "ratio_mx.fast.sdpa"
    base = write_run(tmp_path / "base.json", {"a": (2e-3, 20, {peer: 0.8}), "b": (2e-3, 20, {peer: 0.8})})
    machine_slower = write_run(tmp_path / "r1.json", {"a": (3e-3, 20, {peer: 0.8}), "b": (2e-3, 20, {peer: 0.8})})
    ours_slower = write_run(tmp_path / "r2.json", {"a": (3e-3, 20, {peer: 0.55}), "b": (2e-3, 20, {peer: 0.8})})
    code, out = run(base, machine_slower, "--fail", "25")
    assert code == 0 and "1.50x (limit 1.25x; 1.00x against mx.fast.sdpa) ok" in out
    code, out = run(base, ours_slower, "--fail", "25")
    assert code == 1 and "1.50x (limit 1.25x; 1.45x against mx.fast.sdpa) FAIL" in out
    # A model row's gauge is mlx_lm's own step; with a host-bound row's wider limit.
    base = write_run(tmp_path / "base2.json", {"m": (0.8e-3, 20, {"ratio_mlx_lm": 2.0})})
    run2 = write_run(tmp_path / "r3.json", {"m": (1.4e-3, 20, {"ratio_mlx_lm": 1.9})})
    code, out = run(base, run2, "--fail", "25", "--host-bound-fail", "60", "--host-bound-us", "75")
    assert code == 0 and "(limit 1.60x, host-bound; 1.05x against mlx_lm) ok" in out
    # A 4-bit row's peer may be mlx_lm's quantized SDPA.
    base = write_run(tmp_path / "base3.json", {"q": (2e-3, 20, {"ratio_mlx_lm.qsdpa": 3.0})})
    run3 = write_run(tmp_path / "r4.json", {"q": (3e-3, 20, {"ratio_mlx_lm.qsdpa": 2.0})})
    code, out = run(base, run3, "--fail", "25")
    assert code == 1 and "1.50x (limit 1.25x; 1.50x against mlx_lm.qsdpa) FAIL" in out


def test_a_row_without_a_shared_gauge_is_judged_by_its_time(tmp_path):
    base = write_run(tmp_path / "base.json", {"a": (2e-3, 20, {"ratio_mx.fast.sdpa": 0.8})})
    run_json = write_run(tmp_path / "run.json", {"a": (3e-3, 20, {"ratio_torch.sdpa": 0.8})})
    code, out = run(base, run_json, "--fail", "25")
    assert code == 1 and "1.50x (limit 1.25x) FAIL" in out
