"""ci/nightly.sh, the nightly perf run (ci/nightly.py), end to end on this machine's CPU over a
small subset of tests/perf, and its parts.

The slow tests time real rows: on unchanged code the run passes, also while a second process
loads every core, and it fails on an injected regression (a baseline several times faster than
this machine, against the peers timed beside it too). The others judge saved runs (NIGHTLY_RUN:
nothing timed) and check the merge, the saved baselines and the outputs.
"""

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import fusedattend as fa
from fusedattend.benchmarks.cpu_contention import loaded_cores
from fusedattend.chip import chip_id

ROOT = Path(__file__).resolve().parents[2]
NIGHTLY_SH = ROOT / "ci" / "nightly.sh"
# 4 rows: one call, B = 1, bfloat16 and 4-bit, S = 512 and 2048 (the committed CPU baselines hold them).
SUBSET = "test_decode and not loop and B1- and not S8192"
ROWS = {f"test_decode[cpu-B1-S{S}-{fmt}]" for S in (512, 2048) for fmt in ("bfloat16", "q4")}
FASTER = 8  # the injected regression: a baseline this many times faster than the run
COMMITTED_RUN = sorted((ROOT / "tests/perf/baselines/cpu-amd-epyc-2c").glob("*/*.json"))[-1]

spec = importlib.util.spec_from_file_location("ci_nightly", ROOT / "ci" / "nightly.py")
nightly = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nightly)

needs_cpu = pytest.mark.skipif("cpu" not in fa.available_backends(), reason="the cpu backend is not available")


def run_nightly(tmp_path, storage, passes=3, run=None, env=None):
    """ci/nightly.sh over SUBSET on the cpu backend; (its process, its nightly.json, its output folder)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out"
    summary = tmp_path / "step-summary.md"
    full_env = dict(os.environ, NIGHTLY_SUBSET=SUBSET, NIGHTLY_STORAGE=str(storage), NIGHTLY_OUT=str(out),
                    NIGHTLY_PASSES=str(passes), GITHUB_STEP_SUMMARY=str(summary),
                    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("NIGHTLY_RUN", "NIGHTLY_CHIP", "NIGHTLY_AGAIN_PASSES", "PERF_FAIL", "PERF_HOST_FAIL", "PERF_HOST_US", "FUSEDATTEND_BACKEND"):
        full_env.pop(name, None)
    if run is not None:
        full_env["NIGHTLY_RUN"] = str(run)
    full_env.update(env or {})
    proc = subprocess.run([str(NIGHTLY_SH), "--backend", "cpu"], env=full_env, capture_output=True, text=True,
                          timeout=900)
    report_path = out / "nightly.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return proc, report, out


def judge_saved_run(tmp_path, monkeypatch, storage, run=COMMITTED_RUN, env=None):
    """ci/nightly.py in this process, judging a saved run (NIGHTLY_RUN: nothing timed); (its exit
    status, its nightly.json, its output folder)."""
    out = tmp_path / "out"
    for name in ("NIGHTLY_SUBSET", "NIGHTLY_CHIP", "NIGHTLY_PASSES", "PERF_FAIL", "PERF_HOST_FAIL", "PERF_HOST_US"):
        monkeypatch.delenv(name, raising=False)
    for name, value in dict(NIGHTLY_STORAGE=str(storage), NIGHTLY_OUT=str(out), NIGHTLY_RUN=str(run),
                            GITHUB_STEP_SUMMARY=str(tmp_path / "step-summary.md"), **(env or {})).items():
        monkeypatch.setenv(name, value)
    status = nightly.main([])
    return status, json.loads((out / "nightly.json").read_text()), out


def why(proc):
    return f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


def is_png(path):
    data = Path(path).read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    return data[:8] == b"\x89PNG\r\n\x1a\n" and width > 100 and height > 100


def scaled_baseline(run_path, storage, factor, peers_too):
    """A copy of `run_path` as the only baseline under `storage`, each row `factor` times faster;
    with peers_too, the peers timed beside it were as fast as before, so every ratio to them is
    `factor` times higher (a regression of ours); without, the whole machine was faster."""
    data = json.loads(Path(run_path).read_text())
    for bench in data["benchmarks"]:
        for key in ("min", "max", "mean", "median", "q1", "q3", "iqr", "stddev"):
            bench["stats"][key] /= factor
        if peers_too:
            for key in [k for k in bench["extra_info"] if k.startswith("ratio_")]:
                bench["extra_info"][key] *= factor
    path = storage / "Linux-CPython-3-64bit" / f"0007_{data['machine_info']['fusedattend']['chip']}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


# ------------------------------------------------------------------------------ end to end, timed

def baseline_to_judge_by(first_storage):
    """This chip's committed baseline where the nightly recorded it and it holds the subset's rows;
    else the one the first run recorded a minute ago."""
    committed = ROOT / "tests/perf/baselines" / chip_id()
    newest = nightly.newest_baseline(committed)
    if newest is not None:
        data = json.loads(newest.read_text())
        if "nightly" in data and ROWS <= {b["name"] for b in data["benchmarks"]}:
            return committed
    return first_storage


# One test, its steps in order: under xdist the steps of separate tests could run side by side
# in two workers (and a module fixture once in each).
@pytest.mark.slow
@needs_cpu
def test_end_to_end_on_this_cpu(tmp_path):
    # 1. A chip with no baseline: the run records the first and says so.
    storage = tmp_path / "first" / "baselines"
    proc, report, out = run_nightly(tmp_path / "first", storage, passes=2)
    assert proc.returncode == 0, why(proc)
    assert report["status"] == "first-baseline" and report["passes"] == 2
    saved = sorted(storage.glob("*/*.json"))
    assert [p.name for p in saved] == [f"0001_{chip_id()}.json"] and report["saved_baseline"] == str(saved[0])
    data = json.loads(saved[0].read_text())
    assert {b["name"] for b in data["benchmarks"]} == ROWS and data["nightly"]["passes"] == 2
    assert all(len(b["extra_info"]["nightly_pass_medians"]) == 2 for b in data["benchmarks"])
    summary = (out / "summary.md").read_text()
    assert "first baseline recorded" in summary and str(saved[0]) in summary
    assert (tmp_path / "first" / "step-summary.md").read_text() == summary  # $GITHUB_STEP_SUMMARY
    assert is_png(out / "nightly.png") and report["plot"] == "nightly.png"
    assert (out / "baseline.json").read_bytes() == saved[0].read_bytes()
    first_run = out / "run.json"

    # 2. Unchanged code passes, every row judged against the peer timed beside it.
    judge_by = baseline_to_judge_by(storage)
    proc, report, out = run_nightly(tmp_path / "unchanged", judge_by, passes=3)
    assert proc.returncode == 0, f"against {judge_by}: {why(proc)}"
    assert report["status"] == "pass"
    compared = [r for r in report["rows"] if "ratio" in r]
    assert {r["name"] for r in compared} == ROWS
    # Every CPU row has its gauge in both runs: MLX's SDPA (bf16), mlx_lm's quantized SDPA (4-bit).
    assert {(r["format"], r["gauge"]) for r in compared} == {("bfloat16", "mx.fast.sdpa"), ("q4", "mlx_lm.qsdpa")}
    summary = (out / "summary.md").read_text()
    assert "within limits" in summary and "spread µs" in summary
    assert all(f"`{r['name']}`" in summary for r in compared)
    assert is_png(out / "nightly.png")

    # 3. ... also while a second process keeps every core busy.
    with loaded_cores(seconds=600):
        proc, report, _ = run_nightly(tmp_path / "loaded", judge_by, passes=2)
    assert proc.returncode == 0, f"against {judge_by}, loaded: {why(proc)}"
    assert report["status"] == "pass"

    # 4. A baseline FASTER times faster than this machine (and than the peers beside it): a
    #    regression, slow again when timed again.
    proc, report, out = run_nightly(tmp_path / "regression", scaled_storage(first_run, tmp_path / "faster"),
                                    passes=1, env={"NIGHTLY_AGAIN_PASSES": "1"})
    assert proc.returncode == 1, why(proc)
    assert report["status"] == "regression"
    assert {r["name"] for r in report["rows"] if r["verdict"] == "FAIL"} == ROWS
    assert all(r["retimed"] for r in report["rows"]) and (out / "run.again.json").exists()
    summary = (out / "summary.md").read_text()
    assert "REGRESSION" in summary and "timed again" in summary
    assert is_png(out / "nightly.png")


def scaled_storage(run_path, storage, factor=FASTER, peers_too=True):
    scaled_baseline(run_path, storage, factor, peers_too)
    return storage


# --------------------------------------------------------------------- judged from saved runs

def test_judged_from_a_saved_run_within_limits_and_the_outputs(tmp_path):
    # Through ci/nightly.sh, as the workflow calls it.
    storage = tmp_path / "same"
    scaled_baseline(COMMITTED_RUN, storage, 1.0, peers_too=False)
    proc, report, out = run_nightly(tmp_path, storage, run=COMMITTED_RUN)
    assert proc.returncode == 0, why(proc)
    assert report["status"] == "pass" and report["replayed"] == str(COMMITTED_RUN)
    assert all(r["verdict"] == "ok" and r["ratio"] == pytest.approx(1) for r in report["rows"])
    assert is_png(out / "nightly.png")
    assert "within limits" in (out / "summary.md").read_text()


def test_a_machine_slower_as_a_whole_passes_by_the_gauge(tmp_path, monkeypatch):
    # Every row FASTER times slower, the peers beside them too: the machine, not our code.
    storage = tmp_path / "faster-machine"
    scaled_baseline(COMMITTED_RUN, storage, FASTER, peers_too=False)
    status, report, _ = judge_saved_run(tmp_path, monkeypatch, storage)
    assert status == 0
    gauged = [r for r in report["rows"] if r["gauge"]]
    assert gauged and all(r["ratio"] == pytest.approx(FASTER) and r["verdict"] == "ok" for r in gauged)
    # Rows without a peer in both runs (none in the committed CPU baselines) would be judged by time.
    assert all(r["verdict"] == "FAIL" for r in report["rows"] if not r["gauge"])


def test_a_regression_against_the_peers_fails(tmp_path, monkeypatch):
    storage = tmp_path / "faster-code"
    scaled_baseline(COMMITTED_RUN, storage, FASTER, peers_too=True)
    status, report, out = judge_saved_run(tmp_path, monkeypatch, storage)
    assert status == 1
    assert report["status"] == "regression" and all(r["verdict"] == "FAIL" for r in report["rows"])
    assert all(r["gauge_ratio"] == pytest.approx(FASTER) for r in report["rows"] if r["gauge"])
    assert "REGRESSION" in (out / "summary.md").read_text()
    assert is_png(out / "nightly.png")


def test_a_run_sharing_no_row_with_the_baseline_fails(tmp_path, monkeypatch):
    storage = tmp_path / "other"
    path = scaled_baseline(COMMITTED_RUN, storage, 1.0, peers_too=False)
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        bench["name"] += "-renamed"
    path.write_text(json.dumps(data))
    status, report, _ = judge_saved_run(tmp_path, monkeypatch, storage)
    assert status == 1 and report["status"] == "no-common-rows"


@pytest.mark.parametrize("passes", ["0", "three"])
def test_refuses_a_bad_number_of_passes(tmp_path, monkeypatch, passes):
    monkeypatch.setenv("NIGHTLY_PASSES", passes)
    monkeypatch.setenv("NIGHTLY_OUT", str(tmp_path / "out"))
    assert nightly.main([]) == 2 and not (tmp_path / "out").exists()


def test_refuses_to_start_without_mlx_lm(tmp_path):
    # Without mlx_lm the 4-bit rows would have no gauge and be judged by time alone.
    fake = tmp_path / "fake"
    (fake / "mlx_lm").mkdir(parents=True)
    (fake / "mlx_lm" / "__init__.py").write_text("raise ImportError('no mlx_lm here')\n")
    proc, report, _ = run_nightly(tmp_path, tmp_path / "none", run=COMMITTED_RUN,
                                  env={"PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])})
    assert proc.returncode == 2 and "mlx_lm" in proc.stdout + proc.stderr, why(proc)
    assert not (tmp_path / "none").exists()


# ------------------------------------------------------------------------------------ the parts

def test_passes_merge_by_the_median_of_their_medians_and_ratios(tmp_path):
    paths = []
    for i, (median, ratio) in enumerate([(2.0, 1.0), (1.0, 3.0), (9.0, 2.0)]):
        bench = {"name": "test_decode[cpu-B1-S512-q4]", "fullname": "x::test_decode[cpu-B1-S512-q4]",
                 "stats": {"min": median / 2, "max": median * 2, "mean": median, "stddev": 0.1, "rounds": 5,
                           "median": median, "iqr": 0.2, "q1": median - 0.1, "q3": median + 0.1, "total": 5 * median},
                 "extra_info": {"ratio_mlx_lm.qsdpa": ratio, "kv_bytes": 1e9, "calls_per_round": 1}}
        paths.append(tmp_path / f"pass-{i}.json")
        paths[-1].write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": [bench]}))
    merged = nightly.merge_passes(paths)
    bench = merged["benchmarks"][0]
    assert bench["stats"]["median"] == 2.0 and bench["stats"]["min"] == 0.5 and bench["stats"]["max"] == 18.0
    assert bench["stats"]["rounds"] == 15 and bench["extra_info"]["ratio_mlx_lm.qsdpa"] == 2.0
    assert bench["extra_info"]["nightly_pass_medians"] == [2.0, 1.0, 9.0]
    assert bench["extra_info"]["gbps"] == pytest.approx(0.5)
    assert merged["nightly"] == {"passes": 3}


def test_promote_replaces_the_chips_baseline_with_the_next_number(tmp_path):
    storage = tmp_path / "chip"
    older = storage / "Linux-CPython-3.11-64bit" / "0003_cpu-amd-epyc-2c.json"
    older.parent.mkdir(parents=True)
    older.write_text("{}")
    assert nightly.main(["promote", str(COMMITTED_RUN), "--storage", str(storage)]) == 0
    saved = sorted(storage.glob("*/*.json"))
    assert [p.name for p in saved] == ["0004_cpu-amd-epyc-2c.json"]
    assert saved[0].read_bytes() == COMMITTED_RUN.read_bytes()


def test_limits_are_perf_sh_s():
    assert nightly.limits_for("cpu-x-2c") == {"fail": 50, "host_bound_fail": 50, "host_bound_us": 0}
    assert nightly.limits_for("apple-m4-pro-20c") == {"fail": 25, "host_bound_fail": 60, "host_bound_us": 75}
    perf_sh = (ROOT / "ci" / "perf.sh").read_text()
    assert "cpu-*) default_fail=50% host_fail=50% host_us=0" in perf_sh
    assert "*) default_fail=25% host_fail=60% host_us=75" in perf_sh


def test_subsets():
    assert nightly.subset_args("") == [] and nightly.subset_args(None) == []
    assert nightly.subset_args("small") == nightly.SMALL
    assert nightly.subset_args("bfloat16") == ["-k", "bfloat16"]


def test_gpu_warm_up_runs_for_its_time():
    spec = importlib.util.spec_from_file_location("nightly_warmup", ROOT / "ci" / "nightly_warmup.py")
    warmup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warmup)
    import mlx.core as mx

    assert warmup.warm_up(0.05, mx.cpu) >= 1


def test_nightly_sh_is_executable_and_helps():
    assert os.access(NIGHTLY_SH, os.X_OK)
    out = subprocess.run([str(NIGHTLY_SH), "--help"], capture_output=True, text=True, check=True).stdout
    assert "NIGHTLY_PASSES" in out and "promote" in out
    assert shutil.which("bash")


# --------------------------------------------------------------------- a first policy with the first baseline

WRITES_OUT = ("import sys; a = sys.argv; open(a[a.index('--out') + 1], 'w').write('{}')")


def test_first_policy_is_tuned_only_on_a_gpu_without_one(tmp_path, monkeypatch):
    monkeypatch.delenv("NIGHTLY_TUNE", raising=False)
    monkeypatch.setenv("FUSEDATTEND_POLICY_DIR", str(tmp_path / "policies"))
    assert nightly.first_policy("cpu-x", tmp_path, on_gpu=False) == {"status": "skipped", "why": "no GPU"}
    monkeypatch.setattr(nightly, "TUNE_COMMAND", [sys.executable, "-c", WRITES_OUT])
    got = nightly.first_policy("gpu-x", tmp_path, on_gpu=True)
    assert got["status"] == "written" and (tmp_path / "policy.json").read_text() == "{}"
    assert got["target"] == str(tmp_path / "policies" / "gpu-x.json")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "gpu-x.json").write_text("{}")
    assert nightly.first_policy("gpu-x", tmp_path, on_gpu=True)["status"] == "skipped"  # it has one
    monkeypatch.setenv("NIGHTLY_TUNE", "0")
    assert nightly.first_policy("gpu-y", tmp_path, on_gpu=True)["why"] == "NIGHTLY_TUNE=0"
    monkeypatch.setenv("NIGHTLY_TUNE", "1")
    monkeypatch.setattr(nightly, "TUNE_COMMAND", [sys.executable, "-c", "raise SystemExit(2)"])
    (tmp_path / "policy.json").unlink()
    failed = nightly.first_policy("cpu-x", tmp_path, on_gpu=False)
    assert failed["status"] == "failed" and "exited 2" in failed["why"]
    monkeypatch.setenv("NIGHTLY_TUNE", "yes")
    assert "NIGHTLY_TUNE must be" in nightly.first_policy("gpu-z", tmp_path, on_gpu=True)["why"]


def test_the_summary_names_the_policy_to_commit():
    report = {"chip": "gpu-x", "status": "first-baseline", "storage": "s", "saved_baseline": "s/0001_gpu-x.json",
              "limits": {"fail": 25.0, "host_bound_fail": 60.0, "host_bound_us": 75.0}, "rows": [], "passes": 1,
              "run_commit": "abc", "mlx": "0.32.4", "device": "Device(gpu, 0)",
              "policy": {"status": "written", "file": "policy.json", "log": "tune.log",
                         "target": "fusedattend/gpu/policies/gpu-x.json"}}
    text = nightly.summary_markdown(report)
    assert "`policy.json`" in text and "`fusedattend/gpu/policies/gpu-x.json`" in text
    report["policy"] = {"status": "failed", "why": "tune exited 2 (tune.log)"}
    assert "Tuning its schedule failed: tune exited 2" in nightly.summary_markdown(report)
