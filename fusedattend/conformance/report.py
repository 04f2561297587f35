"""The conformance report: one row a property (pass / fail / n/a, the worst error-to-tolerance
ratio, a failing example with its reproducer, a semantics finding), as a terminal table, JSON
and markdown.

JSON: {"kernel": str, "convention": str, "device": str, "profile": str, "supports": [str],
       "properties": {NAME: {"status": "pass"|"fail"|"n/a", "worst": float|null (inf as 1.8e308),
                             "example": str|null, "kind": "required"|"semantics",
                             "finding": str|null, "note": str|null}}}
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .properties import PROPERTIES

ORDER = list(PROPERTIES)


def merge(results, name, result):
    """Folds one test's result into results[name]: a failure wins over a pass, a pass over n/a;
    worst is the largest ratio seen."""
    old = results.get(name)
    if old is None:
        results[name] = dict(result)
        return
    rank = {"fail": 2, "pass": 1, "n/a": 0}
    worst = [w for w in (old.get("worst"), result.get("worst")) if w is not None]
    keep = result if rank[result["status"]] > rank[old["status"]] else old
    merged = dict(keep)
    merged["worst"] = max(worst) if worst else None
    results[name] = merged


def reproducer(kernel, name, spec):
    """A short script that rebuilds the case and calls the kernel and the oracle."""
    supports = kernel.supports.declared()
    return "\n".join([
        "import numpy as np",
        "from fusedattend.conformance import cases, kernels, properties",
        f"kernel = kernels.load({kernel.spec!r}, {kernel.convention!r}, {supports!r})",
        f"case = cases.build(cases.{spec!r})",
        "out = kernel.call(case)                      # the kernel",
        "expected, stats = cases.oracle_of(case)      # the float64 oracle",
        "print(np.abs(cases.to_np(out) - expected).max())",
        f"properties.check({name!r}, kernel, case)    # raises properties.Failure",
    ])


def _fmt(worst):
    if worst is None:
        return "-"
    return "inf" if worst >= 1e308 else f"{worst:.3g}"


def rows(results):
    for name in ORDER + sorted(set(results) - set(ORDER)):
        if name in results:
            yield name, results[name]


def table(kernel, profile, results):
    """The end-of-run table, lines of text."""
    head = f"fusedattend conformance: {kernel.spec} (convention {kernel.convention}, profile {profile}"
    declared = kernel.supports.declared()
    lines = [head + (f", supports {' '.join(declared)})" if declared else ")")]
    listed = list(rows(results))
    width = max([len("property")] + [len(name) for name, _ in listed])
    lines.append(f"{'property':<{width}} {'kind':<10} {'status':<7} {'worst err/tol':>13}  note")
    for name, r in listed:
        note = r.get("finding") or r.get("note") or ""
        lines.append(f"{name:<{width}} {r['kind']:<10} {r['status']:<7} {_fmt(r.get('worst')):>13}  {note}")
    return lines


def _finite(x):
    """JSON has no inf: an infinite ratio (NaN or Inf in the output) is written as float's max."""
    return 1.7976931348623157e308 if isinstance(x, float) and math.isinf(x) else x


def document(kernel, profile, results):
    import mlx.core as mx

    return {
        "kernel": kernel.spec,
        "convention": kernel.convention,
        "device": str(mx.default_device()),
        "profile": profile,
        "supports": kernel.supports.declared(),
        "properties": {name: {key: _finite(r.get(key)) for key in ("status", "worst", "example", "kind", "finding", "note")}
                       for name, r in rows(results)},
    }


def markdown(doc):
    sup = f" (supports {' '.join(doc['supports'])})" if doc["supports"] else ""
    out = [f"# Conformance: `{doc['kernel']}`", "",
           f"Convention `{doc['convention']}`, device `{doc['device']}`, profile `{doc['profile']}`{sup}.", "",
           "| property | kind | status | worst err/tol | finding / note |", "|---|---|---|---|---|"]
    for name, r in doc["properties"].items():
        note = (r.get("finding") or r.get("note") or "").replace("|", "\\|")
        out.append(f"| {name} | {r['kind']} | {r['status']} | {_fmt(r['worst'])} | {note} |")
    failing = [(n, r) for n, r in doc["properties"].items() if r["status"] == "fail" and r.get("example")]
    if failing:
        out += ["", "## Failing examples"]
        for name, r in failing:
            out += ["", f"### {name}", "", "```python", r["example"], "```"]
    return "\n".join(out) + "\n"


def write(path, doc):
    """Writes PATH (JSON) and its markdown twin (PATH with .md)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    path.with_suffix(".md").write_text(markdown(doc))
    return path, path.with_suffix(".md")
