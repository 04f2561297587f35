"""The command line: `python -m fusedattend bench` end to end on a tiny shape, and `check`."""

import json

import pytest

import fusedattend as fa
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
    failed = {f["impl"] for f in data["failures"]}
    assert {"reference", "mx.fast.sdpa", "dequant+sdpa"} <= impls
    # mlx_lm's quantized path raises on MLX's CUDA backend (quantized_matmul has no implementation
    # for these shapes): there the table records its failure instead of a time.
    assert "mlx_lm.qsdpa" in (impls | failed if "cuda" in fa.available_backends() else impls)
    assert failed <= {"mlx_lm.qsdpa"}
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


def test_cold_mb_calls_read_each_copy_in_turn():
    """--cold-mb: enough copies of the cache for the bytes asked, and each implementation reads
    them one after another (each copy's output differs; the third call is the first copy again)."""
    import mlx.core as mx

    from fusedattend import bench

    one = bench.make_case(1, 16, "bfloat16", H_q=4, H_kv=2, D=64)
    cases = bench.cold_cases(1, 16, "bfloat16", 2 * one["kv_bytes"] + 1, H_q=4, H_kv=2, D=64)
    assert len(cases) == 3
    assert len(bench.cold_cases(1, 16, "bfloat16", 0, H_q=4, H_kv=2, D=64)) == 1
    impls = bench.in_turn(cases[:2], ["reference"])
    for name in ("reference", "mx.fast.sdpa"):
        first, second, third = (impls[name]() for _ in range(3))
        assert not mx.array_equal(first, second) and mx.array_equal(first, third), name


def test_bench_cold_mb_end_to_end(tmp_path):
    out_json = tmp_path / "bench.json"
    rc = main(["bench", "--B", "1", "--S", "16", "--formats", "bfloat16,q4", "--H-q", "4", "--H-kv", "2",
               "--D", "64", "--repeats", "1", "--backends", "reference", "--cold-mb", "1",
               "--json", str(out_json)])
    assert rc == 0
    data = json.loads(out_json.read_text())
    assert data["meta"]["cold_mb"] == 1
    assert {r["impl"] for r in data["results"]} >= {"reference", "mx.fast.sdpa", "dequant+sdpa"}


def test_bench_refuses_negative_cold_mb(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--cold-mb", "-1"])
    assert info.value.code == 2 and "--cold-mb" in capsys.readouterr().err


@pytest.mark.parametrize("args, named", [
    (["--inner", "0"], "--inner"), (["--repeats", "0"], "--repeats"), (["--B", "1,0"], "--B"), (["--S", "0"], "--S"),
    (["--H-kv", "0"], "--H-kv"), (["--H-q", "5", "--H-kv", "2"], "--H-q"), (["--group-size", "0"], "--group-size"),
    (["--formats", "q3"], "q3"), (["--formats", "q4", "--group-size", "48"], "group_size"),
    (["--backends", "tpu"], "--backends"), (["--S", "abc"], "--S: must be a positive int, got 'abc'"),
    (["--B", ","], "--B: needs at least one value"), (["--budget", "nan"], "--budget"),
    (["--budget", "-1"], "--budget"), (["--json", "no/such/folder/run.json"], "--json"),
    (["--plot", "no/such/folder/run.png"], "--plot"),
])
def test_bench_refuses_bad_arguments(args, named, capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--no-peers", "--backends", "reference", "--formats", "float32", *args])
    assert info.value.code == 2 and named in capsys.readouterr().err


def test_check_refuses_an_unknown_backend(capsys):
    with pytest.raises(SystemExit) as info:
        main(["check", "--backend", "tpu"])
    assert info.value.code == 2 and "--backend 'tpu'" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["bfloat16", "q4"])
def test_chain_feeds_each_output_to_the_next_call(fmt):
    """--chain: each implementation's query is its own previous output, across the cache copies
    (the second call equals a call on the first one's output); without it every call takes the
    case's query."""
    import mlx.core as mx

    from fusedattend import bench

    cases = [bench.make_case(1, 16, fmt, H_q=4, H_kv=2, D=64, seed=seed) for seed in (0, 1)]
    chained = bench.in_turn(cases, ["reference"], chain=True)
    plain = bench.implementations(cases[1], ["reference"])
    names = set(chained) - {"torch.sdpa"}  # torch's callable returns no output to compare
    assert {"reference", "dequant+sdpa" if fmt == "q4" else "mx.fast.sdpa"} <= names
    for name in names:
        try:
            first = chained[name]()
            mx.eval(first)  # MLX is lazy: a kernel that cannot run raises here
        except RuntimeError as err:  # mlx_lm's quantized path on MLX's CUDA backend (above)
            assert name == "mlx_lm.qsdpa" and "cuda" in fa.available_backends(), err
            continue
        second = chained[name]()
        assert not mx.array_equal(second, plain[name]()), name
        copy = dict(cases[1], q=first)
        assert mx.array_equal(second, bench.implementations(copy, ["reference"])[name]()), name
    unchained = bench.in_turn(cases[:1], ["reference"])
    assert mx.array_equal(unchained["reference"](), unchained["reference"]())


def test_bench_chain_end_to_end(tmp_path):
    out_json = tmp_path / "bench.json"
    rc = main(["bench", "--B", "1", "--S", "16", "--formats", "bfloat16", "--H-q", "4", "--H-kv", "2",
               "--D", "64", "--repeats", "2", "--inner", "3", "--backends", "reference", "--chain",
               "--json", str(out_json)])
    assert rc == 0
    data = json.loads(out_json.read_text())
    assert data["meta"]["chain"] is True
    assert {r["impl"] for r in data["results"]} >= {"reference", "mx.fast.sdpa"}
