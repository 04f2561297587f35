"""ci/gpu/small_grid_bandwidth.py's probe bodies: every placeholder filled, the threadgroup memory
asked for what cp.async keeps in flight, and (with nvcc) each form compiling without spills."""

import importlib.util
import re
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from tests.kernels import nvcc_wrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci" / "gpu"))  # the probe imports kernel_gaps beside it
spec = importlib.util.spec_from_file_location("small_grid_bandwidth", ROOT / "ci/gpu/small_grid_bandwidth.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

FORMS = [("loads", 1), ("loads", 3), ("ldcg", 2), ("cp.async", 1), ("cp.async", 6)]


@pytest.mark.parametrize("form,depth", FORMS)
def test_placeholders_filled(form, depth):
    body, shared = probe.probe_source(form, depth)
    assert not re.search(r"\b(F|N|PIECES)\b", body)
    assert shared == (probe.WARPS * depth * probe.TILE_BYTES if form == "cp.async" else 0)
    assert ("__ldcg" in body) == (form == "ldcg")
    assert ("cp.async" in body) == (form == "cp.async")


def test_unknown_form_named():
    with pytest.raises(ValueError, match="form"):
        probe.probe_source("tma", 2)


@pytest.mark.skipif(not nvcc_wrap.nvcc_available(), reason="nvcc not installed here")
@pytest.mark.parametrize("form,depth", FORMS)
def test_compiles_without_spills(form, depth):
    body, _ = probe.probe_source(form, depth)
    text = nvcc_wrap.wrap("small_grid_probe", body, "", [("data", mx.uint32)], [("out", mx.uint32)])
    ok, log = nvcc_wrap.compile_cuda(text, options=("-Xptxas", "-v"))
    assert ok, log
    assert "0 bytes spill stores" in log, log
