"""Regenerates the committed conformance reports (docs/conformance/): the conformance suite run on
MLX's own attention and on each fusedattend backend available here, and the summary table.

    python tools/conformance_reports.py                    # this machine's targets, default profile
    python tools/conformance_reports.py --profile quick    # faster
    python tools/conformance_reports.py --summary-only     # rebuild docs/conformance/README.md from the JSON

Each target runs in its own `python -m pytest --pyargs fusedattend.conformance` process (a
failing property is a finding, not an error of this script). Reports of what runs on the default
device (MLX's functions, the reference backend) are named by it (`mx-fast-sdpa-cpu.json`;
`mx-fast-sdpa-gpu.json` from a GPU machine); the other backends' by backend (`fusedattend-cuda.json`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "conformance"

# (report name, --fa-kernel, --fa-convention, --fa-supports, fusedattend backend it needs or None)
TARGETS = [
    ("mx-fast-sdpa", "mlx.core:fast.scaled_dot_product_attention", "sdpa", ["precision=dtype"], None),
    ("mlx-lm-sdpa", "mlx_lm.models.base:scaled_dot_product_attention", "mlx_lm", ["precision=dtype"], None),
    ("mlx-lm-quantized-sdpa", "mlx_lm.models.base:quantized_scaled_dot_product_attention", "quantized",
     ["precision=dtype"], None),
    ("fusedattend-reference", "fusedattend.conformance.targets:reference", "fusedattend", [], "reference"),
    ("fusedattend-cpu", "fusedattend.conformance.targets:cpu", "fusedattend", [], "cpu"),
    ("fusedattend-cuda", "fusedattend.conformance.targets:cuda", "fusedattend", [], "cuda"),
    ("fusedattend-metal", "fusedattend.conformance.targets:metal", "fusedattend", [], "metal"),
    ("fusedattend-quantized-reference", "fusedattend.conformance.targets:quantized_reference", "quantized", [],
     "reference"),
    ("fusedattend-quantized-cpu", "fusedattend.conformance.targets:quantized_cpu", "quantized", [], "cpu"),
    ("fusedattend-quantized-cuda", "fusedattend.conformance.targets:quantized_cuda", "quantized", [], "cuda"),
    ("fusedattend-quantized-metal", "fusedattend.conformance.targets:quantized_metal", "quantized", [], "metal"),
]


def _shown(path):
    path = path.resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _plugin_args():
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "fusedattend_conformance" in names else ["-p", "fusedattend.conformance.plugin"]


def device_name():
    import mlx.core as mx

    return "gpu" if mx.default_device() == mx.gpu else "cpu"


def run(name, kernel, convention, supports, backend, profile, out):
    # the cpu, cuda and metal backends name their device; MLX's functions and the reference
    # backend run on the default one, which the name says
    fixed = backend in ("cpu", "cuda", "metal")
    path = out / (f"{name}.json" if fixed else f"{name}-{device_name()}.json")
    cmd = [sys.executable, "-m", "pytest", *_plugin_args(), "--pyargs", "fusedattend.conformance",
           "--fa-kernel", kernel, "--fa-convention", convention, "--fa-profile", profile,
           "--fa-report", str(path), "--hypothesis-seed", "0", "-p", "no:cacheprovider", "-q", "--noconftest"]
    for item in supports:
        cmd += ["--fa-supports", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if not path.exists():
        sys.exit(f"{name}: no report written (pytest exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    print(f"{name}: {_shown(path)} (pytest exit {proc.returncode})")


def summary(out):
    """docs/conformance/README.md: property x kernel, from every report there."""
    docs = [(p.stem, json.loads(p.read_text())) for p in sorted(out.glob("*.json"))]
    names = []
    for _, doc in docs:
        names += [n for n in doc["properties"] if n not in names]
    lines = ["# Conformance reports", "",
             "The conformance suite (`python -m pytest --pyargs fusedattend.conformance`, docs/conformance.md) run on",
             "MLX's own attention and on fusedattend's backends. Regenerate with `python tools/conformance_reports.py`.",
             "Cells: status and worst error-to-tolerance ratio; semantics findings below.", "",
             "| property | " + " | ".join(f"[{stem}]({stem}.md)" for stem, _ in docs) + " |",
             "|---|" + "---|" * len(docs)]
    for n in names:
        cells = []
        for _, doc in docs:
            r = doc["properties"].get(n)
            if r is None:
                cells.append("")
                continue
            w = r.get("worst")
            worst = "" if w is None else (" (inf)" if w >= 1e308 else f" ({w:.2g})")
            cells.append(r["status"] + worst)
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## Findings", ""]
    for stem, doc in docs:
        found = [(n, r.get("finding") or r.get("note")) for n, r in doc["properties"].items() if r["status"] == "fail"]
        sup = f", supports {' '.join(doc['supports'])}" if doc["supports"] else ""
        lines.append(f"- **{stem}** (`{doc['kernel']}`, convention `{doc['convention']}`{sup}): "
                     + ("; ".join(f"{n}: {why}" for n, why in found) if found else "every applicable property passes"))
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"summary: {_shown(out / 'README.md')}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default", choices=("quick", "default", "nightly"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        import fusedattend

        available = fusedattend.available_backends()
        for name, kernel, convention, supports, backend in TARGETS:
            if backend is None or backend in available:
                run(name, kernel, convention, supports, backend, args.profile, args.out)
    summary(args.out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
