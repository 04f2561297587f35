"""The README's semantics table is what tools/conformance_reports.py makes of the committed reports,
and a report's finding reaches its cell."""

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import conformance_reports  # noqa: E402


def _block(text):
    return text.split(conformance_reports.BEGIN)[1].split(conformance_reports.END)[0].strip().splitlines()


def test_readme_table_is_generated_from_the_reports():
    assert _block((ROOT / "README.md").read_text()) == conformance_reports.semantics_table(conformance_reports.OUT), (
        "README.md's semantics table is out of date: run python tools/conformance_reports.py --summary-only")


def test_a_failing_backend_is_named_in_its_cell(tmp_path):
    for path in conformance_reports.OUT.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    doc = json.loads((tmp_path / "fusedattend-cpu.json").read_text())
    doc["properties"]["batch_invariance"].update(status="fail", note="request 1 of 2 alone differs")
    (tmp_path / "fusedattend-cpu.json").write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{conformance_reports.BEGIN}\nold\n{conformance_reports.END}\nafter\n")
    conformance_reports.update_readme(tmp_path, readme)
    rows = {line.split(" | ")[0]: line for line in _block(readme.read_text())}
    assert "cpu: **no**: request 1 of 2 alone differs" in rows["| request b of a batch is bit-identical to request b called alone"]
    assert readme.read_text().endswith(f"{conformance_reports.END}\nafter\n")
