"""docs/performance.md is the generator's output from benchmarks/results/*.json, whole; a bench
--json run compacts into a results file that reads back as the run."""

import json
from pathlib import Path

import pytest

from fusedattend.benchmarks import generate_results, performance_page

ROOT = Path(__file__).resolve().parents[2]


def test_committed_page_is_the_generators_output():
    page = performance_page.render(performance_page.load_results(), generate_results.load())
    assert (ROOT / "docs/performance.md").read_text() == page, (
        "docs/performance.md is out of date: run python -m fusedattend.benchmarks.performance_page")


def test_readme_tables_are_the_generators_output():
    readme = (ROOT / "README.md").read_text()
    results = performance_page.load_results()
    assert performance_page.render_readme(readme, results) == readme, (
        "README.md's performance tables are out of date: run python -m fusedattend.benchmarks.performance_page")
    for r in results:
        assert f"**{r['chip']}**" in readme


def test_readme_without_the_markers_is_an_error():
    with pytest.raises(ValueError, match="performance tables"):
        performance_page.render_readme("# a README\n", performance_page.load_results())


def test_every_chip_has_a_section_and_its_command():
    results = performance_page.load_results()
    assert {r["chip"] for r in results} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3", "cpu-amd-epyc-2c"}
    page = performance_page.render(results)
    for r in results:
        assert f"## {r['chip']}" in page and r["command"] in page and r["mlx"] in page
        assert r["date"] and r["device"] and r["columns"] == list(performance_page.COLUMNS)


def _run():
    rows = [dict(format="bfloat16", B=1, S=S, impl=impl, us=us, median_us=us * 1.1, samples=3, inner=1,
                 kv_bytes=1 << 20, gbps=gbps) for S in (16, 64)
            for impl, us, gbps in (("cpu", 10.0, 100.0), ("mx.fast.sdpa", 25.0, 40.0))]
    meta = dict(date="2026-01-01T00:00:00", chip="cpu-test-1c", mlx="0.0", mlx_lm=None, device="Device(cpu, 0)",
                command="python -m fusedattend bench --B 1", shape=dict(H_q=4, H_kv=2, D=64, L=1), repeats=3,
                inner=1, backends=["cpu"], cold_mb=0, chain=False, memory_read_gbps=200.04)
    return {"meta": meta, "results": rows, "failures": [], "ratios": {}}


def test_add_compacts_a_run_and_writes_the_page(tmp_path):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(_run()))
    results, page = tmp_path / "results", tmp_path / "performance.md"
    results.mkdir()
    assert performance_page.main(["--results", str(results), "--out", str(page), "--add", str(run_json)]) == 0
    saved = json.loads((results / "cpu-test-1c.json").read_text())
    assert saved["rows"][0] == ["bfloat16", 1, 16, "cpu", 10.0, 100.0] and saved["memory_read_gbps"] == 200.0
    back = performance_page.expand(saved)
    assert back["results"][1]["impl"] == "mx.fast.sdpa" and back["meta"]["chip"] == "cpu-test-1c"
    text = page.read_text()
    assert "| 1 | 16 | 10.0 | 25.0 | 100 | 50% | 2.50x |" in text
    assert performance_page.main(["--results", str(results), "--out", str(page), "--check"]) == 0
    page.write_text(text + "appended\n")
    assert performance_page.main(["--results", str(results), "--out", str(page), "--check"]) == 1
