"""A chip's generation results (benchmarks/results/generate/<chip>.json): generate-bench runs
merged cell by cell, the newest time of each cell kept beside its command, and their table."""

import json

import pytest

from fusedattend.benchmarks import generate_results, performance_page


def _row(B, context, arm, tps=100.0, **extra):
    return dict(batch=B, context=context, arm=arm, tokens_per_s=tps, ms_per_step=1e3 * B / tps, ttft_s=0.1,
                peak_bytes=2**30, kv_bytes_per_token=1000.0, **extra)


def _run(rows, command="python -m fusedattend generate-bench --batch 1", chip="gpu-x", model="qwen3-4b"):
    return dict(chip=chip, device="GPU X", mlx="0.0", mlx_lm="0.0", date="2026-01-01T00:00:00", command=command,
                model=model, layers=None, tokens=32, window=128, complete=True, rows=rows, attention_error=None)


def test_a_newer_run_replaces_only_its_own_cells():
    first = generate_results.merged(None, _run([_row(1, 2048, "bf16"), _row(1, 2048, "fused"), _row(4, 2048, "fused")],
                                               command="first"))
    second = generate_results.merged(first, _run([_row(1, 2048, "fused", tps=150.0)], command="second"))
    assert [r["command"] for r in second["runs"]] == ["first", "second"]
    assert [(r["batch"], r["arm"]) for r in second["runs"][0]["rows"]] == [(1, "bf16"), (4, "fused")]
    assert second["runs"][1]["rows"][0]["tokens_per_s"] == 150.0
    # a run whose every cell was measured again leaves the file
    third = generate_results.merged(second, _run([_row(1, 2048, "bf16"), _row(4, 2048, "fused")], command="third"))
    assert [r["command"] for r in third["runs"]] == ["second", "third"]
    # another model's cells are other cells
    other = generate_results.merged(third, _run([_row(1, 2048, "fused")], model="llama-3-8b", command="fourth"))
    assert len(other["runs"]) == 3


@pytest.mark.parametrize("bad, match", [({"rows": []}, "not a generate-bench"),
                                        (_run([], chip="gpu-y"), "gpu-y")])
def test_a_run_of_another_kind_or_chip_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        generate_results.merged(generate_results.merged(None, _run([_row(1, 2048, "bf16")])), bad)


def test_the_table_has_the_ratios_errors_and_ties():
    rows = [_row(32, 8192, "bf16", 1000.0), dict(batch=32, context=8192, arm="mlx_lm 4-bit", error="RuntimeError: no "),
            _row(32, 8192, "dequantize", 250.0), _row(32, 8192, "fused", 1200.0, parted_at_ties=[[28, 14]]),
            dict(batch=32, context=32768, arm="bf16", error="skipped: needs 144.0 GiB")]
    lines = generate_results.table(generate_results.merged(None, _run(rows)))
    text = "\n".join(lines)
    assert "| qwen3-4b | 32 | 8192 | 1000.0 | raised | 250.0 | 1200.0 | 4.80x | 1.20x | 1.0 / 1.0 | 1 |" in text
    assert "| qwen3-4b | 32 | 32768 | skipped | - | - | - | - | - | - / - | 1 |" in text
    assert "- mlx_lm 4-bit raised at qwen3-4b B=32 8192: RuntimeError: no\n" in text + "\n"
    assert "1 of 32 requests parted at a near tie (request, step: 28, 14)" in text
    assert "`python -m fusedattend generate-bench --batch 1`" in text


def test_add_generate_merges_a_run_and_writes_the_page(tmp_path):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(_run([_row(1, 2048, "bf16"), _row(1, 2048, "fused", 120.0)])))
    results, page = tmp_path / "results", tmp_path / "performance.md"
    results.mkdir()
    assert performance_page.main(["--results", str(results), "--out", str(page), "--add-generate", str(run_json)]) == 0
    saved = json.loads((results / "generate" / "gpu-x.json").read_text())
    assert saved["chip"] == "gpu-x" and saved["runs"][0]["rows"][1]["tokens_per_s"] == 120.0
    assert "### gpu-x generation" in page.read_text() and "1.20x" in page.read_text()


def test_committed_generation_results_have_what_the_page_needs():
    results = generate_results.load()
    assert results, "benchmarks/results/generate/ holds no chip"
    for result in results:
        assert {"chip", "device", "mlx", "mlx_lm", "note", "runs"} <= set(result)
        for run in result["runs"]:
            assert run["command"].startswith("python -m fusedattend generate-bench") and run["rows"]
