"""Generation results a chip (benchmarks/results/generate/<chip>.json), merged from generate-bench
runs, and their tables on docs/performance.md.

    python -m fusedattend generate-bench <options> --json run.json
    python -m fusedattend.benchmarks.performance_page --add-generate run.json

A chip's file holds its runs, oldest first, each with its command, date and rows (one a batch,
context and arm). Adding a run drops the older runs' rows of the same model, batch, context and
arm, so a grid filled over several runs (one cell a GPU session, say) keeps the newest time of
each cell, and each row stays beside the command that measured it. A run cut short adds the cells
it finished.
"""

from __future__ import annotations

import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "results" / "generate"
ARMS = ("bf16", "mlx_lm 4-bit", "dequantize", "fused")  # window_generate.ARMS, without importing MLX
CHIP_META = ("chip", "device", "mlx", "mlx_lm")
RUN_META = ("command", "date", "code", "model", "layers", "tokens", "window")
NOTE = ("Random bf16 weights of the model's configuration; each arm run once untimed first; a step is "
        "the median decode step (token read to token read); tokens/s = B over it.")


def _cell(model, row):
    return model, row["batch"], row["context"], row["arm"]


def merged(existing, run: dict) -> dict:
    """The chip file `existing` (None: none yet) with generate-bench's --json `run` added."""
    missing = [k for k in ("chip", "command", "model", "rows") if k not in run]
    if missing:
        raise ValueError(f"run: not a generate-bench --json run (no {', '.join(missing)})")
    existing = existing or {}
    if existing.get("chip", run["chip"]) != run["chip"]:
        raise ValueError(f"run: measured on {run['chip']}, the file is {existing['chip']}'s")
    new = {_cell(run["model"], r) for r in run["rows"]}
    runs = []
    for old in existing.get("runs", []):
        rows = [r for r in old["rows"] if _cell(old["model"], r) not in new]
        if rows:
            runs.append(dict(old, rows=rows))
    added = {k: run[k] for k in RUN_META if run.get(k) is not None}
    head = {k: run.get(k) for k in CHIP_META}
    return dict(head, note=existing.get("note", NOTE), runs=runs + [dict(added, rows=run["rows"])])


def add(run_path: Path, folder: Path = FOLDER) -> Path:
    """Merge the run at `run_path` into its chip's file in `folder`; returns that file."""
    run = json.loads(Path(run_path).read_text())
    path = folder / f"{run.get('chip')}.json"
    existing = json.loads(path.read_text()) if path.is_file() else None
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged(existing, run), indent=1, ensure_ascii=False) + "\n")
    return path


def load(folder: Path = FOLDER) -> list:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _tokens(row):
    if row is None:
        return "-"
    if "error" in row:
        return "skipped" if row["error"].startswith("skipped") else "raised"
    return f"{row['tokens_per_s']:.1f}"


def _ratio(a, b):
    if not (a and b) or "error" in a or "error" in b:
        return "-"
    return f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x"


def _gib(row):
    return "-" if row is None or "error" in row else f"{row['peak_bytes'] / 2**30:.1f}"


def table(result: dict) -> list:
    """Markdown lines of one chip: a row a model, B and context, tokens/s of every arm, the
    fused arm's ratios, peak memory; then each run's command and date, and what raised."""
    rows, errors, ties = {}, {}, []
    for i, run in enumerate(result["runs"], 1):
        for r in run["rows"]:
            rows[_cell(run["model"], r)] = dict(r, run=i)
            where = f"{run['model']} B={r['batch']} {r['context']}"
            if "error" in r and not r["error"].startswith("skipped"):
                errors.setdefault((r["arm"], r["error"].rstrip()), []).append(where)
            if r["arm"] == "fused" and r.get("parted_at_ties"):
                ties.append(f"- {where}: {len(r['parted_at_ties'])} of {r['batch']} requests parted at a near tie "
                            "(request, step: " + "; ".join(f"{a}, {b}" for a, b in r["parted_at_ties"]) + ")")
    cells = sorted({key[:3] for key in rows}, key=lambda c: (c[0], c[2], c[1]))
    lines = ["| model | B | context | " + " | ".join(f"{a} tok/s" for a in ARMS)
             + " | fused / dequantize | fused / bf16 | peak GiB bf16 / fused | run |",
             "|---|---:|---:|" + "---:|" * (len(ARMS) + 4)]
    for model, B, context in cells:
        arm = {a: rows.get((model, B, context, a)) for a in ARMS}
        runs = sorted({r["run"] for r in arm.values() if r})
        lines.append(f"| {model} | {B} | {context} | " + " | ".join(_tokens(arm[a]) for a in ARMS)
                     + f" | {_ratio(arm['fused'], arm['dequantize'])} | {_ratio(arm['fused'], arm['bf16'])}"
                     + f" | {_gib(arm['bf16'])} / {_gib(arm['fused'])} | {', '.join(map(str, runs))} |")
    lines.append("")
    for i, run in enumerate(result["runs"], 1):
        code = f", code {run['code']}" if run.get("code") else ""
        lines.append(f"{i}. {run.get('date', '')}{code}: `{run['command']}`")
    for (arm, error), where in errors.items():
        lines.append(f"- {arm} raised at {', '.join(where)}: {error}")
    lines += ties
    return lines + [""]


def section(results: list) -> list:
    """docs/performance.md's generation section: one table a chip (empty: no results)."""
    if not results:
        return []
    lines = ["## Generation", "",
             "`python -m fusedattend generate-bench`: greedy decoding of an mlx_lm model (module docstring of "
             "`fusedattend.benchmarks.window_generate`), tokens/s of each arm; the fused and dequantize arms "
             "gave the same tokens in every row (a parting at a near tie is reported by the run). "
             "To add a run: `python -m fusedattend.benchmarks.performance_page --add-generate run.json`.", ""]
    for result in results:
        lines += [f"### {result['chip']} generation", "",
                  f"{result['device']}, MLX {result['mlx']}, mlx_lm {result['mlx_lm']}. {result['note']}", ""]
        lines += table(result)
    return lines
