"""The command line: `python -m fusedattend` (--help, --version, usage errors), `bench` end to end
on a tiny shape, and `check` (its legend, progress, summary and rows)."""

import io
import json
import subprocess
import sys

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


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fusedattend", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_the_commands():
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "check" in proc.stdout and "bench" in proc.stdout and "--version" in proc.stdout


def test_version():
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"fusedattend {fa.__version__}"


@pytest.mark.parametrize("argv, named", [(["frobnicate"], "unknown command 'frobnicate'"), ([], "a command is needed")])
def test_unknown_or_missing_command_is_a_one_line_usage_error(argv, named, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and named in captured.err
    assert "check, bench, cpu-contention" in captured.err


def test_bench_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: 1,8)" in text and "(default: 1024,4096,16384)" in text and "(default: 7)" in text


def test_check_explains_its_columns_and_sums_up_per_backend(capsys):
    assert main(["check", "--grid", "Q", "--backend", "reference"]) == 0
    printed = capsys.readouterr().out
    assert printed.index("error / tolerance") < printed.index("summary")
    assert "reference: 48/48 cases within tolerance (ok), worst error/tolerance" in printed
    # not a terminal: a progress line every PROGRESS_EVERY cases and at the end
    assert "[48/48] grid Q: " in printed
    # rows only with --verbose (or for failing cases)
    assert "Q-B1-Hq16-Hkv4-L4-S300-D128-float16-causal-q4g128" not in printed
    assert main(["check", "--grid", "Q", "--backend", "reference", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    row = "Q-B1-Hq16-Hkv4-L4-S300-D128-float16-causal-q4g128"
    assert verbose.index("error / tolerance") < verbose.index(row) < verbose.index("summary")


def test_check_prints_the_rows_of_failing_cases(monkeypatch, capsys):
    from fusedattend.conformance import grids

    compare = grids.compare
    failing = grids.GRID_A[3].id

    def compare_failing_one(actual, expected, tol, rows=None):
        ratio, err = compare(actual, expected, tol, rows)
        return (ratio + 5, err) if current_case[0] == failing else (ratio, err)

    current_case = [None]
    make_case = grids.make_case

    def make_case_noting(case, seed):
        current_case[0] = case.id
        return make_case(case, seed=seed)

    monkeypatch.setattr(grids, "compare", compare_failing_one)
    monkeypatch.setattr(grids, "make_case", make_case_noting)
    assert main(["check", "--grid", "A", "--backend", "reference"]) == 1
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("A-")]
    assert len(rows) == 1 and rows[0].startswith(failing) and "FAIL" in rows[0]
    assert "reference: 95/96 cases within tolerance (1 FAILED)" in printed


def test_check_progress_on_a_terminal_rewrites_one_line():
    from fusedattend import check

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    assert check.main(["--grid", "A", "--backend", "reference"], out=out) == 0
    text = out.getvalue()
    assert "\r\033[K[ 1/96] grid A: " in text and "\r\033[K[96/96] grid A: " in text
    assert text.count("\n[") == 0  # every progress line is rewritten in place, none kept


def test_cold_mb_calls_read_each_copy_in_turn():
    """--cold-mb: enough copies of the cache for the bytes asked, and each implementation reads
    them one after another (each copy's output differs; the third call is the first copy again)."""
    import mlx.core as mx

    from fusedattend.benchmarks import harness as bench

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

    from fusedattend.benchmarks import harness as bench

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
