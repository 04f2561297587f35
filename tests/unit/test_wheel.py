"""An installed wheel checks itself: `python -m fusedattend check` needs nothing of the source
checkout (the oracle and grids ship in fusedattend.conformance), and the wheel holds the kernels
and the committed benchmark results."""

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from. Built from a copy: a build in the checkout leaves build/lib
# behind, whose stale files a later wheel would pick up.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "fusedattend", "metal", "benchmarks")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(out)],
                   check=True, capture_output=True, text=True, cwd=out)
    (path,) = out.glob("fusedattend-*.whl")
    return path


def test_wheel_holds_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"fusedattend/conformance/oracle.py", "fusedattend/conformance/grids.py",
            "fusedattend/metal/decode_attention.metal", "fusedattend/benchmarks/harness.py",
            "fusedattend/benchmarks/results/nvidia-h200.json"} <= names
    assert not any(n.startswith(("tests/", "ci/")) for n in names)
    assert {"fusedattend/conformance/plugin.py", "fusedattend/conformance/test_conformance.py",
            "fusedattend/conformance/controls.py"} <= names


def test_wheel_registers_the_conformance_plugin(wheel):
    """pytest finds the conformance plugin through the wheel's pytest11 entry point."""
    with zipfile.ZipFile(wheel) as z:
        (entry_points,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = z.read(entry_points).decode()
    assert "[pytest11]" in text and "fusedattend_conformance = fusedattend.conformance.plugin" in text


@pytest.mark.slow
def test_installed_wheel_runs_check(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, text=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Only the installed copy and the environment's own packages (mlx, numpy): not the checkout,
    # whose editable install lives in site-packages as a path hook, so -S keeps site out and the
    # packages' folder is named outright.
    packages = [p for p in site.getsitepackages() if Path(p, "mlx").is_dir()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), *packages])
    proc = subprocess.run([sys.executable, "-S", "-m", "fusedattend", "check", "--grid", "A",
                           "--backend", "reference"], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reference: 96/96 cases within tolerance" in proc.stdout
    where = subprocess.run([sys.executable, "-S", "-c", "import fusedattend; print(fusedattend.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(target)
    # the conformance plugin, found through the installed copy's pytest11 entry point
    proc = subprocess.run([sys.executable, "-S", "-m", "pytest", "--pyargs", "fusedattend.conformance",
                           "--fa-kernel", "fusedattend.conformance.controls:correct", "--fa-profile", "quick",
                           "-p", "no:cacheprovider", "-q"], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fusedattend conformance: fusedattend.conformance.controls:correct" in proc.stdout
