"""The conformance plugin (fusedattend.conformance) run as a kernel author runs it, in-process:
inert without --fa-kernel; one line per problem with bad arguments; each negative control fails
the property its bug breaks and passes the others; MLX's own SDPA gives its known findings; the
printed reproducer replays a failure; declared supports make properties n/a."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

import fusedattend
from fusedattend.conformance import plugin
from fusedattend.conformance.controls import CONTROLS


def _plugins():
    # Installed (CI's editable install), the entry point loads the plugin into every pytest run;
    # from a checkout without it, the run is handed the module.
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "fusedattend_conformance" in names else [plugin]


def run(tmp_path, capfd, *args, cpu=True):
    """(exit code, stdout + stderr) of an in-process pytest with the plugin, isolated from the
    project's conftest and ini; on the CPU unless cpu=False (on CUDA, MLX's own SDPA and the
    controls' matmuls need not be batch invariant)."""
    import mlx.core as mx

    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    device = mx.default_device()
    if cpu:
        mx.set_default_device(mx.cpu)
    try:
        code = pytest.main(["-c", str(ini), "--rootdir", str(tmp_path), "--noconftest", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "-q", *args], plugins=_plugins())
    finally:
        mx.set_default_device(device)
    out, err = capfd.readouterr()
    return int(code), out + err


def report(tmp_path, capfd, kernel, *args, cpu=True):
    path = tmp_path / "report.json"
    code, out = run(tmp_path, capfd, "--pyargs", "fusedattend.conformance", "--fa-kernel", kernel,
                    "--fa-profile", "quick", "--fa-report", str(path), *args, cpu=cpu)
    assert path.exists(), out
    return code, json.loads(path.read_text()), out


def test_inert_without_fa_kernel(tmp_path, capfd):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    code, out = run(tmp_path, capfd, str(tmp_path / "test_plain.py"))
    assert code == 0 and "1 passed" in out and "conformance" not in out
    code, out = run(tmp_path, capfd, "--pyargs", "fusedattend.conformance", "-rs")
    assert code == 0 and "no --fa-kernel given" in out and "passed" not in out and "failed" not in out


BAD = textwrap.dedent("""
    import mlx.core as mx
    not_callable = 3
    def crashes(q, k, v, *, scale, mask):
        raise RuntimeError("boom")
    def wrong_shape(q, k, v, *, scale, mask):
        return q[..., :1]
    def wrong_dtype(q, k, v, *, scale, mask):
        return q.astype(mx.float16)
    def refuses(q, k, v, *, scale, mask):
        raise ValueError("not today")
""")


@pytest.mark.parametrize("args, lines", [
    (["--fa-kernel", "no_such_module_here:f"], ["cannot import module 'no_such_module_here'"]),
    (["--fa-kernel", "fa_bad:nope"], ["fa_bad has no attribute 'nope'"]),
    (["--fa-kernel", "fa_bad:not_callable"], ["fa_bad.not_callable is not callable"]),
    (["--fa-kernel", "fa_bad"], ["expected MODULE:ATTR"]),
    (["--fa-kernel", "fa_bad:crashes", "--fa-convention", "weird"], ["--fa-convention weird: unknown convention"]),
    (["--fa-kernel", "fa_bad:crashes"], ["the kernel raised RuntimeError: boom"]),
    (["--fa-kernel", "fa_bad:wrong_shape"], ["returned shape (1, 1, 1, 1) for queries of shape (1, 1, 1, 32)"]),
    (["--fa-kernel", "fa_bad:wrong_dtype"], ["returned mlx.core.float16 for mlx.core.float32 queries"]),
    (["--fa-kernel", "fa_bad:refuses"], ["refused the smallest case it declares it supports, Spec(B=1, H_q=1, H_kv=1, L=1, S=4, D=32, seed=0) "
                                         "(ValueError: not today)"]),
    (["--fa-kernel", "fa_bad:crashes", "--fa-supports", "masks=foo", "--fa-supports", "bogus=1"],
     ["--fa-supports masks: unknown foo", "--fa-supports bogus: unknown key"]),
], ids=["module", "attribute", "not-callable", "no-colon", "convention", "crash", "shape", "dtype", "refuses",
        "supports"])
def test_bad_arguments_give_one_line_each(tmp_path, capfd, monkeypatch, args, lines):
    (tmp_path / "fa_bad.py").write_text(BAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fa_bad", raising=False)
    code, out = run(tmp_path, capfd, "--pyargs", "fusedattend.conformance", *args)
    assert code == pytest.ExitCode.USAGE_ERROR, out
    errors = [line for line in out.splitlines() if line.strip()]
    assert len(errors) == len(lines) and "Traceback" not in out, out
    for error, expected in zip(errors, lines):
        assert expected in error, out


@pytest.mark.parametrize("name", list(CONTROLS))
def test_negative_control(tmp_path, capfd, name):
    convention, broken, must_fail, must_pass = CONTROLS[name]
    code, doc, out = report(tmp_path, capfd, f"fusedattend.conformance.controls:{name}",
                            "--fa-convention", convention)
    status = {p: r["status"] for p, r in doc["properties"].items()}
    assert {p: status[p] for p in must_fail} == {p: "fail" for p in must_fail}, out
    assert {p: status[p] for p in must_pass} == {p: "pass" for p in must_pass}, out
    assert code == (1 if must_fail else 0), out
    assert "Traceback" not in out


def test_correct_control_passes_with_layers_and_key_ranges(tmp_path, capfd):
    code, doc, out = report(tmp_path, capfd, "fusedattend.conformance.controls:correct",
                            "--fa-convention", "fusedattend")
    status = {p: r["status"] for p, r in doc["properties"].items()}
    assert code == 0 and status["layer_invariance"] == "pass" and set(status.values()) == {"pass", "n/a"}, out


def test_mx_fast_sdpa_findings(tmp_path, capfd):
    """MLX's own SDPA on this machine: accurate to its dtype rounding and batch invariant, with
    the two semantics where it differs from fusedattend as findings, not tracebacks."""
    code, doc, out = report(tmp_path, capfd, "mlx.core:fast.scaled_dot_product_attention",
                            "--fa-supports", "precision=dtype")
    props = doc["properties"]
    for name in ("parity", "batch_invariance", "slice_invariance", "gqa", "determinism", "mask_forms"):
        assert props[name]["status"] == "pass", (name, out)
    assert props["fully_masked_row"]["status"] == "fail"
    assert "mean of V" in props["fully_masked_row"]["finding"]
    assert props["masked_nan_values"]["status"] == "fail"
    assert "NaN or Inf in a masked-out value row" in props["masked_nan_values"]["finding"]
    assert props["partly_hidden_nan_values"]["status"] == "fail"
    assert "rows that do not see it" in props["partly_hidden_nan_values"]["finding"]
    assert props["quantized_parity"]["status"] == "n/a" and props["layer_invariance"]["status"] == "n/a"
    assert "Traceback" not in out and "mean of V over all keys" in out
    assert (tmp_path / "report.md").read_text().startswith("# Conformance: `mlx.core:fast.scaled_dot_product_attention`")


def test_reproducer_replays_the_failure(tmp_path, capfd):
    code, doc, out = report(tmp_path, capfd, "fusedattend.conformance.controls:no_rescale")
    example = doc["properties"]["parity"]["example"]
    assert "cases.Spec(" in example and "kernels.load('fusedattend.conformance.controls:no_rescale'" in example
    from fusedattend.conformance.properties import Failure

    with pytest.raises(Failure, match="tolerance"):
        exec(compile(example, "reproducer", "exec"), {})


KERNEL = textwrap.dedent("""
    from fusedattend.conformance.controls import correct

    def decode_only(q, k, v, *, scale, mask):
        if q.shape[-2] > 1:
            raise ValueError("queries: one row a head")
        return correct(q, k, v, scale=scale, mask=mask)

    def picky(q, k, v, *, scale, mask):  # declares everything, refuses some inputs: conforming
        if q.shape[-1] == 128:
            raise TypeError("queries: D = 128 is not built")
        return correct(q, k, v, scale=scale, mask=mask)

    decode_only.fa_supports = {"max_L": 1, "masks": ["none", "causal"]}
""")


def test_declared_supports_make_properties_na(tmp_path, capfd, monkeypatch):
    (tmp_path / "fa_kernels.py").write_text(KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fa_kernels", raising=False)
    code, doc, out = report(tmp_path, capfd, "fa_kernels:decode_only", "--fa-supports", "gqa=no")
    status = {p: r["status"] for p, r in doc["properties"].items()}
    assert code == 0, out
    for name in ("gqa", "masked_garbage", "fully_masked_row", "masked_nan_values", "partly_hidden_nan_values",
                 "mask_forms"):
        assert status[name] == "n/a", (name, out)
    assert status["parity"] == status["batch_invariance"] == "pass"
    assert doc["supports"] == ["masks=none,causal", "max_L=1", "gqa=no"]
    code, doc, out = report(tmp_path, capfd, "fa_kernels:picky")
    assert code == 0, out
    assert "refused" in doc["properties"]["parity"]["note"]


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "quantized"])
def test_fusedattend_backend_conforms(tmp_path, capfd, backend, quantized):
    """Each fusedattend backend passes every applicable property, semantics ones included (the
    committed reports in docs/conformance/ say so)."""
    kernel = f"fusedattend.conformance.targets:{'quantized_' if quantized else ''}{backend}"
    code, doc, out = report(tmp_path, capfd, kernel, "--fa-convention", "quantized" if quantized else "fusedattend",
                            cpu=backend in ("reference", "cpu"))
    status = {p: r["status"] for p, r in doc["properties"].items()}
    assert code == 0 and set(status.values()) == {"pass", "n/a"}, out
    assert status["quantized_parity" if quantized else "layer_invariance"] == "pass"


HANGS = textwrap.dedent("""
    import time
    import mlx.core as mx
    def hangs_past_four_keys(q, k, v, *, scale, mask):
        if k.shape[-2] > 4:  # the smoke call (S = 4) returns; the first property's case does not
            time.sleep(600)
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
""")


# where fusedattend is imported from: the subprocess below finds it there, installed or not
PACKAGE_ROOT = str(Path(fusedattend.__file__).resolve().parents[1])


def test_a_hung_kernel_ends_the_run_with_one_line(tmp_path):
    import subprocess
    import time

    (tmp_path / "fa_hangs.py").write_text(HANGS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    plugin_arg = [] if not _plugins() else ["-p", "fusedattend.conformance.plugin"]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_arg, "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
         "--noconftest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--pyargs", "fusedattend.conformance",
         "--fa-kernel", "fa_hangs:hangs_past_four_keys", "--fa-profile", "quick", "--fa-timeout", "3"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), PACKAGE_ROOT])})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "the kernel did not return within 3 s on Spec(" in out and "Traceback" not in out, out
    assert time.monotonic() - start < 120, out
