"""ci/backend_report.py: the parity gate's job summary (did the backend's kernels compile and run,
MLX's version, the device)."""

import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

import fusedattend as fa

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "backend_report.py"


def report(tmp_path, *args):
    summary = tmp_path / "summary.md"
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(summary),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert summary.read_text() == proc.stdout
    return proc.stdout


@pytest.mark.skipif("cpu" not in fa.available_backends(), reason="the cpu backend is not available")
def test_a_backend_here_compiles_and_runs(tmp_path):
    text = report(tmp_path, "--backend", "cpu", "--step", "check=success", "--step", "suite=failure")
    assert "kernels compiled and ran: **yes**" in text
    assert "decode_attention, bfloat16: ok" in text and "quantized_decode_attention, 4-bit: ok" in text
    assert f"MLX {mx.__version__}" in text and f"default device {mx.default_device()}" in text
    assert "| check | success |" in text and "| suite | failure |" in text


@pytest.mark.skipif("metal" in fa.available_backends(), reason="Metal is available here")
def test_a_backend_missing_here_says_so_and_exits_0(tmp_path):
    text = report(tmp_path, "--backend", "metal", "--step", "check=")
    assert "Metal kernels compiled and ran: **no**: backend `metal` not available here" in text
    assert "mx.metal.is_available(): False" in text
    assert "| check | not run |" in text


def test_a_kernel_that_raises_is_reported(monkeypatch):
    sys.path.insert(0, str(ROOT / "ci"))
    try:
        import backend_report
    finally:
        sys.path.remove(str(ROOT / "ci"))

    def broken(*args, **kwargs):
        raise RuntimeError("[metal::Device] Unable to build metal library from source")

    monkeypatch.setattr(fa, "available_backends", lambda: ["reference", "metal"])
    monkeypatch.setattr(fa, "decode_attention", broken)
    ok, notes = backend_report.probe("metal")
    assert not ok and "Unable to build metal library" in notes
