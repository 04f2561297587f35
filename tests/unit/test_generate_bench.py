"""The end-to-end generation benchmark (`python -m fusedattend generate-bench`) on a tiny model:
its rows, and its stop where the dequantize and fused arms part."""

import json

import mlx.core as mx
import pytest

pytest.importorskip("mlx_lm")
from benchmarks import generate_results, window_generate  # noqa: E402

# float32: in bfloat16 the random model's near-ties part the arms (the module docstring)
ARGS = ["--model", "tiny", "--layers", "1", "--batch", "2", "--context", "20", "--tokens", "4", "--window", "4",
        "--dtype", "float32"]


def test_rows_of_every_arm(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert window_generate.main(ARGS + ["--json", str(path)]) == 0
    saved = json.loads(path.read_text())
    rows = saved["rows"]
    assert saved["complete"] and [r["arm"] for r in rows] == list(window_generate.ARMS)
    for r in rows:
        if "error" in r:  # mlx_lm's 4-bit decode raises on MLX 0.32.4's CUDA backend: a row that says so
            assert r["arm"] == "mlx_lm 4-bit" and mx.default_device() == mx.gpu, r
            continue
        assert r["tokens_per_s"] > 0 and r["ttft_s"] > 0 and r["peak_bytes"] > 0 and r["kv_bytes_per_token"] > 0
        assert r["ms_per_step"] == pytest.approx(1e3 * 2 / r["tokens_per_s"]) and r["ms_per_step_mean"] > 0
    bf16, _, dequantize, fused = (r.get("kv_bytes_per_token") for r in rows)
    assert dequantize == fused < bf16
    assert "| 2 | 20 | fused |" in capsys.readouterr().out
    # the run names its chip and command, so that it merges into that chip's results file
    assert saved["command"] == "python -m fusedattend generate-bench " + " ".join(ARGS + ["--json", str(path)])
    merged = generate_results.merged(None, saved)
    assert merged["chip"] == saved["chip"] and merged["runs"][0]["rows"] == rows
    assert generate_results.ARMS == window_generate.ARMS  # its copy, kept free of MLX


def test_stops_where_the_arms_part(monkeypatch, capsys):
    real = window_generate.run_arm

    def parting(arm, *args):
        result = real(arm, *args)
        if arm == "fused":
            result["tokens"][1][2] += 1
            result["top_two"][1][2] = [6.0, 5.0]  # a whole logit apart in this arm: no tie
        return result

    monkeypatch.setattr(window_generate, "run_arm", parting)
    assert window_generate.main(ARGS + ["--arms", "dequantize", "fused"]) == 1
    captured = capsys.readouterr()
    assert "part at request 1, step 2" in captured.err and "not at a tie" in captured.err
    assert "tokens/s" not in captured.out


def test_a_parting_at_a_near_tie_is_reported_and_the_run_goes_on(monkeypatch, tmp_path, capsys):
    real = window_generate.run_arm

    def tied(arm, *args):
        result = real(arm, *args)
        if "tokens" in result and arm in ("dequantize", "fused") and len(result["tokens"][1]) == 4:  # timed runs
            result["top_two"][1][2] = [5.3, 5.25]  # 5.3's bfloat16 steps are 0.03125: within two
            if arm == "fused":
                result["tokens"][1][2] += 1
                result["tokens"][1][3] += 1  # after a parting, tokens are not compared
        return result

    monkeypatch.setattr(window_generate, "run_arm", tied)
    path = tmp_path / "rows.json"
    assert window_generate.main(ARGS + ["--arms", "dequantize", "fused", "--json", str(path)]) == 0
    assert "part at request 1, step 2" in capsys.readouterr().err
    rows = json.loads(path.read_text())["rows"]
    assert [r["parted_at_ties"] for r in rows] == [[[1, 2]], [[1, 2]]]
    assert all(r["median_top_gap"] > 0 for r in rows)


@pytest.mark.parametrize("top_two, tie", [([5.3, 5.25], True), ([5.3, 5.23], False), ([-5.3, -5.3], True),
                                          ([0.0, 0.0], True), ([1.0, 0.99], True), ([1.0, 0.98], False),
                                          ([float("nan"), 1.0], False), ([float("inf"), 1.0], False)])
def test_near_ties_are_two_bfloat16_steps_of_the_top(top_two, tie):
    assert window_generate.near_tie(top_two) == tie


@pytest.mark.parametrize("bad", [["--batch", "0"], ["--window", "0"], ["--model", "gpt2"]])
def test_bad_arguments(bad):
    with pytest.raises(SystemExit) as exit_:
        window_generate.main(ARGS + bad)
    assert exit_.value.code == 2


def test_attention_error_with_and_without_the_window(tmp_path):
    path = tmp_path / "rows.json"
    assert window_generate.main(ARGS + ["--arms", "fused", "--error-steps", "3", "--json", str(path)]) == 0
    errors = json.loads(path.read_text())["attention_error"]
    assert sorted(errors) == ["no window", "window"]
    assert all(len(e) == 3 and all(0 < x < 1 for x in e) for e in errors.values())


def test_a_run_cut_short_keeps_its_finished_cells(monkeypatch, tmp_path):
    path = tmp_path / "rows.json"
    real, calls = window_generate.run_arm, []

    def cut_in_the_second_cell(arm, model, prompts, tokens, window):
        calls.append((prompts.shape[1], arm, tokens))
        if len(calls) > 4:
            raise KeyboardInterrupt
        return real(arm, model, prompts, tokens, window)

    monkeypatch.setattr(window_generate, "run_arm", cut_in_the_second_cell)
    with pytest.raises(KeyboardInterrupt):
        window_generate.main(ARGS + ["--context", "20", "24", "--arms", "dequantize", "fused", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert not saved["complete"] and [(r["context"], r["arm"]) for r in saved["rows"]] == [(20, "dequantize"), (20, "fused")]
    # each arm's timed run follows an untimed one of the same prompts, which compiles its kernels
    assert calls[:4] == [(20, "dequantize", 3), (20, "dequantize", 4), (20, "fused", 3), (20, "fused", 4)]


def test_an_arm_that_raises_gets_its_row_and_the_grid_goes_on(monkeypatch, tmp_path, capsys):
    path = tmp_path / "rows.json"
    real, calls = window_generate.run_arm, []

    def out_of_memory_at_24(arm, model, prompts, tokens, window):
        calls.append((prompts.shape[1], arm, tokens))
        if arm == "fused" and prompts.shape[1] == 24:
            return {"error": "RuntimeError: out of memory"}
        return real(arm, model, prompts, tokens, window)

    monkeypatch.setattr(window_generate, "run_arm", out_of_memory_at_24)
    argv = ARGS + ["--context", "24", "20", "--arms", "dequantize", "fused", "--json", str(path)]
    assert window_generate.main(argv) == 0
    rows = json.loads(path.read_text())["rows"]
    assert [(r["context"], r["arm"], "error" in r) for r in rows] == [
        (24, "dequantize", False), (24, "fused", True), (20, "dequantize", False), (20, "fused", False)]
    assert "B=2 context=24, fused: RuntimeError: out of memory" in capsys.readouterr().err
    assert (24, "fused", 4) not in calls  # an arm whose untimed run raised is not run again


def test_prefill_chunks_hold_a_bounded_number_of_tokens():
    assert [window_generate.prefill_chunk(B) for B in (1, 4, 8, 32, 10**5)] == [2048, 2048, 1024, 256, 1]


def test_cache_bytes_follow_each_arms_layout():
    model = window_generate.build_model("tiny", layers=1, dtype=mx.float32)  # H_kv = 1, D = 128
    bytes_of = {arm: window_generate.cache_bytes(arm, model, 2, 10, window=4) for arm in window_generate.ARMS}
    full_token = 2 * 128 * 4  # K and V, float32
    quantized_token = 2 * (128 // 2 + 2 * 2 * 4)  # 4-bit codes, two groups' scales and biases
    assert bytes_of == {"bf16": 2 * 10 * full_token, "mlx_lm 4-bit": 2 * 10 * quantized_token,
                        "dequantize": 2 * (10 * quantized_token + 8 * full_token),
                        "fused": 2 * (10 * quantized_token + 8 * full_token)}


def test_a_cell_too_big_for_the_device_is_skipped_with_a_row(monkeypatch, tmp_path, capsys):
    model = window_generate.build_model("tiny", layers=1, dtype=mx.float32)
    weights = mx.get_active_memory()
    # room for the 4-bit caches of B = 2 over 24 tokens, not the full-precision ones
    memory = (weights + window_generate.cache_bytes("mlx_lm 4-bit", model, 2, 24, 4)) / 0.9 + 1
    assert window_generate.too_big("mlx_lm 4-bit", model, 2, 24, 4, memory) is None
    assert window_generate.too_big("bf16", model, 2, 24, 4, memory).startswith("skipped: needs")
    assert window_generate.too_big("bf16", model, 2, 24, 4, None) is None  # the CPU: no check

    path, calls = tmp_path / "rows.json", []
    real = window_generate.run_arm
    monkeypatch.setattr(window_generate, "device_memory", lambda: 10**4)  # nothing fits
    monkeypatch.setattr(window_generate, "run_arm", lambda arm, *a: calls.append(arm) or real(arm, *a))
    assert window_generate.main(ARGS + ["--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert not calls and all(r["error"].startswith("skipped: needs") for r in rows) and len(rows) == 4
    assert "| 2 | 20 | bf16 | skipped: needs" in capsys.readouterr().out
