"""The command line: `python -m fusedattend bench` end to end on a tiny shape, and `check`."""

import json

import pytest

from fusedattend.__main__ import main


def test_bench_writes_table_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", "--B", "1,2", "--S", "16,64", "--formats", "bfloat16,q4", "--H-q", "4",
               "--H-kv", "2", "--D", "64", "--repeats", "1", "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "GB/s" in printed and "mx.fast.sdpa" in printed
    data = json.loads(out_json.read_text())
    assert data["meta"]["chip"] and data["meta"]["memory_read_gbps"] > 0
    impls = {r["impl"] for r in data["results"]}
    assert {"reference", "mx.fast.sdpa", "mlx_lm.qsdpa", "dequant+sdpa"} <= impls
    assert all(r["us"] > 0 and r["gbps"] > 0 for r in data["results"])
    pytest.importorskip("matplotlib")
    assert out_png.stat().st_size > 10_000


def test_unknown_subcommand_is_a_usage_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "usage" in capsys.readouterr().err


def test_check_prints_a_table_per_backend(capsys):
    assert main(["check", "--grid", "Q", "--backend", "reference"]) == 0
    printed = capsys.readouterr().out
    assert "reference: 48/48 within tolerance" in printed
    assert "Q-B1-Hq16-Hkv4-L4-S300-D128-float16-causal-q4g128" in printed
