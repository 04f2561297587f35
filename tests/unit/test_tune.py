"""python -m fusedattend tune: its sweep, the file it writes, and that the schedule loads that file
on its chip (and only there); without a GPU it says so. The timings are stubbed: what is checked
is the search and the bookkeeping, not a chip's speed."""

import dataclasses
import json
import os

import pytest

from fusedattend import __main__ as cli, backends, tune
from fusedattend.gpu import schedule


@pytest.fixture
def clean_policy_env(monkeypatch, tmp_path):
    monkeypatch.delenv(schedule.SCHEDULE_ENV, raising=False)
    monkeypatch.setenv(schedule.POLICY_DIR_ENV, str(tmp_path / "policies"))
    return tmp_path / "policies"


def test_dry_run_prints_the_sweep_anywhere(capsys, clean_policy_env):
    assert cli.main(["tune", "--dry-run", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "tune (dry run)" in out and str(clean_policy_env) in out
    for field in tune.TUNABLE:
        assert field in out


def test_without_a_gpu_it_says_it_needs_one(capsys, monkeypatch, clean_policy_env):
    monkeypatch.setattr(tune, "_gpu_backend", lambda wanted: None)
    assert cli.main(["tune"]) == 2
    err = capsys.readouterr().err
    assert "needs a GPU backend (metal or cuda)" in err and "--dry-run" in err
    assert not clean_policy_env.exists()


@pytest.mark.parametrize("argv, named", [(["--fields", "max_rows"], "not tunable: max_rows"),
                                          (["--passes", "0"], "--passes"), (["--min-gain", "1.5"], "--min-gain")])
def test_bad_arguments_are_usage_errors(capsys, argv, named):
    with pytest.raises(SystemExit) as exit_:
        tune.main(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_every_policy_of_the_space_is_valid_where_it_says():
    """Each field's candidates load as a Policy file would (positive, simdgroups in range), and
    `valid` rejects exactly the combinations load_policy rejects (min_block > max_block)."""
    for field, candidates in tune.TUNABLE.items():
        assert field in schedule.POLICY_FIELDS and len(set(candidates)) == len(candidates) > 1
        for value in candidates:
            assert isinstance(value, int) and value > 0
    assert not tune.valid(dataclasses.replace(schedule.Policy(), min_block=512, max_block=256))
    assert all(v <= 8 for k, c in tune.TUNABLE.items() if k.endswith("simdgroups") for v in c)


def _fake_times(best_values):
    """time_policy stand-in: 1 s a shape, less the closer each field is to best_values."""
    def time_policy(policy, calls, repeats, inner):
        t = 1.0 + sum(abs(getattr(policy, f) - v) / v for f, v in best_values.items())
        return {shape: t for shape in calls}
    return time_policy


def test_sweep_finds_the_fastest_candidate_of_each_field(monkeypatch):
    want = {"single_pass_max_s": 1024, "simdgroups": 8, "min_block": 128}
    monkeypatch.setattr(tune, "time_policy", _fake_times(want))
    best, score = tune.sweep(schedule.Policy(), ["single_pass_max_s", "simdgroups", "min_block", "max_block"],
                             {("shape",): None}, passes=2, min_gain=0.0, repeats=1, inner=1, log=lambda line: None)
    assert {f: getattr(best, f) for f in want} == want and best.max_block == schedule.Policy().max_block
    assert score < 1.0


def test_sweep_keeps_the_start_within_min_gain_and_stops_at_its_budget(monkeypatch):
    monkeypatch.setattr(tune, "time_policy", _fake_times({"simdgroups": 5}))  # 4 and 8: 20% and 60% slower
    best, score = tune.sweep(schedule.Policy(), ["simdgroups"], {("s",): None}, passes=1, min_gain=0.02,
                             repeats=1, inner=1, log=lambda line: None)
    assert best == schedule.Policy() and score == 1.0
    monkeypatch.setattr(tune, "time_policy", _fake_times({"simdgroups": 8}))
    best, _ = tune.sweep(schedule.Policy(), ["simdgroups"], {("s",): None}, passes=1, min_gain=0.0, repeats=1,
                         inner=1, budget=0.0, log=lambda line: None)
    assert best == schedule.Policy()


def test_tune_writes_the_chip_policy_that_the_schedule_then_loads(monkeypatch, capsys, clean_policy_env):
    """The file names the swept fields and notes; on its chip current_policy is that policy, on
    another chip, or with FUSEDATTEND_SCHEDULE set ("default" included), it is not; replays made
    before are not reused after (their key holds the policy folder)."""
    monkeypatch.setattr(tune, "_gpu_backend", lambda wanted: "cuda")
    monkeypatch.setattr("fusedattend.chip.chip_id", lambda: "nvidia-test-gpu")
    monkeypatch.setattr("fusedattend.benchmarks.harness.make_case", lambda *a, **k: {})
    monkeypatch.setattr(tune, "_window_case", lambda *a, **k: {})
    monkeypatch.setattr(tune, "_call", lambda case, backend: None)
    monkeypatch.setattr(tune, "time_policy", _fake_times({"single_pass_max_s": 2048, "quantized_mma_simdgroups": 4}))
    monkeypatch.setattr(tune, "check_policy", lambda policy, backend, formats: True)
    before = backends._replay_key("signature", "cuda")
    assert schedule.current_policy() == schedule.Policy()  # no file yet: today's schedule

    assert cli.main(["tune", "--quick", "--min-gain", "0"]) == 0
    path = clean_policy_env / "nvidia-test-gpu.json"
    data = json.loads(path.read_text())
    assert data["_chip"] == "nvidia-test-gpu" and data["_speedup"] > 1 and set(tune.TUNABLE) <= set(data)
    assert "wrote" in capsys.readouterr().out

    schedule._POLICIES.clear()
    tuned = schedule.current_policy()
    assert tuned.single_pass_max_s == 2048 and tuned.quantized_mma_simdgroups == 4
    assert tuned == schedule.load_policy(str(path))
    monkeypatch.setenv(schedule.SCHEDULE_ENV, "default")
    assert schedule.current_policy() == schedule.Policy()
    monkeypatch.delenv(schedule.SCHEDULE_ENV)
    monkeypatch.setattr("fusedattend.chip.chip_id", lambda: "nvidia-other-gpu")
    schedule._POLICIES.clear()
    assert schedule.current_policy() == schedule.Policy()
    monkeypatch.setenv(schedule.POLICY_DIR_ENV, str(clean_policy_env) + os.sep)
    assert backends._replay_key("signature", "cuda") != before
    schedule._POLICIES.clear()


def test_a_failed_check_writes_nothing(monkeypatch, capsys, clean_policy_env):
    monkeypatch.setattr(tune, "_gpu_backend", lambda wanted: "cuda")
    monkeypatch.setattr("fusedattend.benchmarks.harness.make_case", lambda *a, **k: {})
    monkeypatch.setattr(tune, "_window_case", lambda *a, **k: {})
    monkeypatch.setattr(tune, "_call", lambda case, backend: None)
    monkeypatch.setattr(tune, "time_policy", _fake_times({"simdgroups": 8}))
    monkeypatch.setattr(tune, "check_policy", lambda policy, backend, formats: False)
    assert tune.main(["--quick", "--out", str(clean_policy_env / "x.json")]) == 1
    assert "nothing written" in capsys.readouterr().err and not clean_policy_env.exists()


def test_policy_in_force_restores_the_environment(monkeypatch):
    monkeypatch.setenv(schedule.SCHEDULE_ENV, "default")
    with tune.policy_in_force(dataclasses.replace(schedule.Policy(), simdgroups=8)):
        assert schedule.current_policy().simdgroups == 8
    assert os.environ[schedule.SCHEDULE_ENV] == "default"


def test_the_window_check_fails_a_batch_dependent_result(monkeypatch):
    """tune's check of the window format (run here on the cpu backend) passes the real call, and
    fails one whose requests' results depend on the batch around them."""
    import fusedattend as fa

    lines = []
    assert tune._check_window(259, "cpu", lines.append) and "alone: True" in lines[-1]
    real = fa.windowed_decode_attention

    def batch_dependent(q, *args, **kwargs):
        out = real(q, *args, **kwargs)
        return out + (0.01 if q.shape[0] > 1 else 0.0)

    monkeypatch.setattr(fa, "windowed_decode_attention", batch_dependent)
    assert not tune._check_window(259, "cpu", lines.append) and "alone: False" in lines[-1]
