"""The GitHub workflows (.github/workflows): linted by actionlint where it is installed (.ci/run
installs it), every script they call exists, is executable and has a test, the hosted jobs need
no secrets, the self-hosted jobs are skipped where no such runner is registered, and the linux-cpu
job runs what .ci/run runs."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
TESTS = [p for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name]


def load(name):
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def triggers(workflow):
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True


def runs(workflow):
    """(job name, step) for every step with a run: script."""
    return [(name, step) for name, job in workflow["jobs"].items() for step in job.get("steps", []) if "run" in step]


def is_self_hosted(job):
    return "self-hosted" in json.dumps(job.get("runs-on")) or "NIGHTLY_MAC_RUNNERS" in json.dumps(job.get("runs-on"))


def test_the_two_workflows_are_there():
    assert [p.name for p in WORKFLOWS] == ["nightly-perf.yml", "parity-gate.yml"]


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint not installed (.ci/run installs it)")
def test_actionlint_passes():
    proc = subprocess.run(["actionlint", "-no-color"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_script_a_workflow_calls_exists_is_executable_and_tested():
    called = set()
    for path in WORKFLOWS:
        for _, step in runs(yaml.safe_load(path.read_text())):
            called |= set(re.findall(r"(?<![\w./-])(\.?ci/[\w./-]+)", step["run"]))
    assert {"ci/nightly.sh", "ci/backend_report.py"} <= called
    tests_text = {p: p.read_text() for p in TESTS}
    for script in sorted(called):
        path = ROOT / script
        assert path.is_file(), f"{script}: called by a workflow, missing"
        assert os.access(path, os.X_OK), f"{script}: not executable"
        assert path.read_text().startswith("#!"), f"{script}: no #! line"
        testers = [p.name for p, text in tests_text.items() if path.name in text]
        assert testers, f"{script}: no test under tests/ names it"


def test_linux_cpu_runs_ci_runs_install_and_test_command():
    ci_run = (ROOT / ".ci" / "run").read_text().splitlines()
    pytest_line = next(line for line in ci_run if "python -m pytest" in line and not line.startswith("#"))
    install_line = next(line for line in ci_run if "pip install" in line and "-e '.[cpu,test]'" in line)
    steps = [step["run"].strip() for name, step in runs(load("parity-gate.yml")) if name == "linux-cpu"]
    assert pytest_line.strip() in steps
    assert any(install_line.replace("-q ", "").strip() in step for step in steps)


def test_the_workflows_lint_step_installs_what_ci_run_installs():
    ci_run = (ROOT / ".ci" / "run").read_text()
    lint = [step["run"] for name, step in runs(load("parity-gate.yml")) if "actionlint" in step["run"]]
    assert lint, "linux-cpu lints the workflows"
    package = re.search(r'"(actionlint[\w-]*==[\d.]+)"', lint[0]).group(1)
    assert package in ci_run and "\nactionlint" in ci_run


def test_hosted_jobs_need_no_secrets_and_the_token_reads_only():
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        assert workflow["permissions"] == {"contents": "read"}, path.name
        for name, job in workflow["jobs"].items():
            if not is_self_hosted(job):
                assert "secrets." not in json.dumps(job), f"{path.name}: {name} uses a secret"
    for path in WORKFLOWS:
        assert "secrets." not in path.read_text(), f"{path.name} names a secret"


def test_self_hosted_jobs_are_skipped_where_no_runner_is_registered():
    gate = load("parity-gate.yml")["jobs"]
    assert gate["self-hosted-metal"]["runs-on"] == ["self-hosted", "macOS", "ARM64"]
    assert gate["self-hosted-cuda"]["runs-on"] == ["self-hosted", "linux", "nvidia"]
    assert "vars.HAS_SELF_HOSTED_MAC == 'true'" in gate["self-hosted-metal"]["if"]
    assert "vars.HAS_SELF_HOSTED_NVIDIA == 'true'" in gate["self-hosted-cuda"]["if"]
    for name in ("self-hosted-metal", "self-hosted-cuda"):
        # A fork's pull request never runs on our machines.
        assert "github.event.pull_request.head.repo.full_name == github.repository" in gate[name]["if"]
    nightly = load("nightly-perf.yml")["jobs"]["nightly"]
    assert nightly["if"] == "vars.HAS_SELF_HOSTED_MAC == 'true'"
    assert '"self-hosted", "macOS", "ARM64"' in nightly["strategy"]["matrix"]["runner"]
    assert nightly["runs-on"] == "${{ matrix.runner }}"
    for path in WORKFLOWS:
        for name, job in yaml.safe_load(path.read_text())["jobs"].items():
            if is_self_hosted(job):
                assert "vars.HAS_SELF_HOSTED_" in job.get("if", ""), f"{path.name}: {name}"


def test_the_suites_each_job_runs():
    jobs = load("parity-gate.yml")["jobs"]

    def scripts(name):
        return "\n".join(step.get("run", "") for step in jobs[name]["steps"])

    assert "python -m fusedattend check --backend metal" in scripts("macos-metal")
    assert "python -m pytest tests/property --backend metal" in scripts("macos-metal")
    assert jobs["macos-metal"]["strategy"]["matrix"]["os"] == ["macos-14", "macos-15"]
    assert "tests/property tests/parity" in scripts("self-hosted-metal")
    assert "tests/property tests/parity tests/kernels --backend cuda" in scripts("self-hosted-cuda")
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert f"compute-sanitizer --tool {tool} --error-exitcode 99" in scripts("self-hosted-cuda")
    assert "python -m tests.kernels.kernel_mutants --summary" in scripts("linux-cpu")  # a survivor fails the job
    for name in ("linux-cpu", "macos-metal", "self-hosted-metal", "self-hosted-cuda"):
        summary = jobs[name]["steps"][-1]
        assert summary["if"] == "always()" and "ci/backend_report.py" in summary["run"], name


def changes_pattern():
    script = next(step["run"] for name, step in runs(load("parity-gate.yml")) if name == "changes")
    return re.search(r"grep -qE '([^']+)'", script).group(1)


@pytest.mark.parametrize("path, runs_suites", [
    ("metal/decode.metal", True), ("fusedattend/gpu.py", True), ("tests/unit/test_api.py", True),
    ("benchmarks/harness.py", True), ("conftest.py", True), ("pyproject.toml", True), ("ci/nightly.sh", True),
    (".github/workflows/parity-gate.yml", True), ("docs/ci.md", False), ("README.md", False),
    (".github/workflows/nightly-perf.yml", False), ("docs/metal/x.md", False),
])
def test_the_suites_run_when_the_change_touches_what_they_test(path, runs_suites):
    proc = subprocess.run(["grep", "-qE", changes_pattern()], input=path + "\n", text=True)
    assert (proc.returncode == 0) == runs_suites


def test_the_gate_passes_skipped_jobs_and_fails_failed_ones():
    workflow = load("parity-gate.yml")
    assert triggers(workflow).keys() == {"pull_request", "workflow_dispatch"}  # every PR: `gate` always reports
    gate = workflow["jobs"]["gate"]
    assert gate["if"] == "always()"
    assert set(gate["needs"]) == set(workflow["jobs"]) - {"gate"}
    step = gate["steps"][-1]
    for results, status in [("success success skipped skipped skipped", 0), ("success skipped", 0),
                            ("success failure skipped", 1), ("success cancelled", 1), ("failure", 1)]:
        proc = subprocess.run(["bash", "-c", step["run"]], env=dict(os.environ, RESULTS=results),
                              capture_output=True, text=True)
        assert proc.returncode == status, results


def test_the_nightly_runs_ci_nightly_sh_and_uploads_its_outputs():
    workflow = load("nightly-perf.yml")
    assert set(triggers(workflow)) == {"schedule", "workflow_dispatch"}
    steps = workflow["jobs"]["nightly"]["steps"]
    nightly = next(step for step in steps if step.get("run") == "ci/nightly.sh")
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == nightly["env"]["NIGHTLY_OUT"]
    assert {"NIGHTLY_SUBSET", "NIGHTLY_PASSES"} <= set(nightly["env"])
