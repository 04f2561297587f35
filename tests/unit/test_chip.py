"""fusedattend.chip: the names per-chip baselines are filed under (tests/perf/baselines/<chip>/)."""

import subprocess
import sys

import pytest

from fusedattend import chip

IOREG = """+-o AGXAcceleratorG16X  <class AGXAcceleratorG16X, id 0x10000032a, registered, matched, active>
    {
      "IOClass" = "AGXAcceleratorG16X"
      "gpu-core-count" = 20
      "model" = "Apple M4 Pro"
    }
"""
SYSTEM_PROFILER = """Graphics/Displays:

    Apple M2:

      Chipset Model: Apple M2
      Type: GPU
      Bus: Built-In
      Total Number of Cores: 10
"""


def fake_commands(outputs):
    """A stand-in for chip._command_output: the text for the command's first word, "" otherwise."""
    def run(args):
        return outputs.get(args[0], "")
    return run


@pytest.fixture
def mac(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(chip, "_gpu_name", lambda: "Apple M4 Pro")


def test_apple_brand_and_gpu_cores_from_ioreg(mac, monkeypatch):
    monkeypatch.setattr(chip, "_command_output",
                        fake_commands({"sysctl": "Apple M4 Pro\n", "ioreg": IOREG}))
    assert chip.chip_id() == "apple-m4-pro-20c"


def test_apple_gpu_cores_from_system_profiler_when_ioreg_says_nothing(mac, monkeypatch):
    monkeypatch.setattr(chip, "_gpu_name", lambda: "Apple M2")
    monkeypatch.setattr(chip, "_command_output",
                        fake_commands({"sysctl": "Apple M2\n", "system_profiler": SYSTEM_PROFILER}))
    assert chip.chip_id() == "apple-m2-10c"


def test_apple_without_a_core_count_or_brand_string(mac, monkeypatch):
    # A virtual machine (GitHub's hosted macOS runners) shows no AGXAccelerator; without sysctl
    # the name is MLX's device name.
    monkeypatch.setattr(chip, "_gpu_name", lambda: "Apple Paravirtual device")
    monkeypatch.setattr(chip, "_command_output", fake_commands({}))
    assert chip.chip_id() == "apple-paravirtual-device"
    monkeypatch.setattr(chip, "_command_output", fake_commands({"sysctl": "Apple M1 (Virtual)\n"}))
    assert chip.chip_id() == "apple-m1-virtual"


def test_nvidia_and_cpu_names_are_unchanged(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(chip, "_command_output", lambda args: pytest.fail(f"ran {args} off macOS"))
    monkeypatch.setattr(chip, "_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    assert chip.chip_id() == "nvidia-h100-80gb-hbm3"
    monkeypatch.setattr(chip, "_gpu_name", lambda: None)
    monkeypatch.setattr(chip, "_cpu_model", lambda: "AMD EPYC 7B13 64-Core Processor")
    monkeypatch.setattr(chip.os, "cpu_count", lambda: 2)
    assert chip.chip_id() == "cpu-amd-epyc-7b13-2c"


def test_a_missing_command_reads_as_no_output():
    assert chip._command_output(["fusedattend-no-such-command"]) == ""


def test_the_module_prints_this_machines_id():
    out = subprocess.run([sys.executable, "-m", "fusedattend.chip"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == chip.chip_id()
