#!/usr/bin/env python3
"""The nightly perf run (ci/nightly.sh runs it): time tests/perf on this chip, compare each row with
the chip's newest baseline by the project's rules, and report.

    ci/nightly.sh                          # every perf row of this chip's default backend
    NIGHTLY_SUBSET=small ci/nightly.sh     # test_decode at B = 1 only: about a minute on a CPU
    ci/nightly.sh -k bfloat16              # arguments are pytest options (-k, --backend), not paths
    python ci/nightly.py promote build/nightly/run.json   # make a run the chip's new baseline

What it does:
1. names the chip (`python -m fusedattend.chip`); the baselines are tests/perf/baselines/<chip>/;
2. times the perf rows NIGHTLY_PASSES times (default 3), each pass a pytest-benchmark run of
   tests/perf (-p no:xdist; on a GPU each test starts after NIGHTLY_WARMUP_S of GPU work,
   ci/nightly_warmup.py), and merges the passes: a row's time is the median of its passes'
   medians, and its ratio to each peer timed beside it the median of its passes' ratios;
3. with no baseline for the chip, saves this run as its first (0001_<chip>.json) and says so
   (on a GPU chip with no policy file, also tunes its schedule: first_policy);
4. else compares with the newest baseline by fusedattend.benchmarks.perf_compare: a row fails past
   its limit only if it is also past it against its gauge, the peer timed beside it in the same
   process (MLX's SDPA for the bf16 rows, mlx_lm's quantized SDPA for the 4-bit ones); rows that
   fail are timed again (NIGHTLY_AGAIN_PASSES passes of those rows, default twice NIGHTLY_PASSES:
   more rounds where the first were in doubt) and fail the run only if slow again;
5. writes summary.md (also appended to $GITHUB_STEP_SUMMARY when set), nightly.json and
   nightly.png (µs a call against S per implementation and format, this run against the
   baseline, the passes' spread as bars) to NIGHTLY_OUT (default build/nightly), beside the
   merged run (run.json: the form a baseline takes) and the baseline it was judged against;
6. exits 0 (within limits, or a first baseline recorded), 1 (a regression, or no row in common
   with the baseline), 2 (a usage or setup error), or pytest's status when a perf test failed.

Environment: NIGHTLY_OUT, NIGHTLY_PASSES, NIGHTLY_AGAIN_PASSES, NIGHTLY_SUBSET (`small`, or a -k expression),
NIGHTLY_STORAGE (the baseline folder; default the chip's), NIGHTLY_CHIP (the chip's name; default
fusedattend.chip's), NIGHTLY_RUN (judge this earlier run.json instead of timing one: no second
timing), NIGHTLY_WARMUP_S (GPU warm-up before each test, default 1 s), NIGHTLY_TUNE and NIGHTLY_TUNE_S
(first_policy), and ci/perf.sh's limits:
PERF_FAIL (default 25%, 50% on cpu-* chips), PERF_HOST_FAIL (60%; 50% on cpu-*) for rows whose
baseline call is under PERF_HOST_US (75 us on a GPU; none on a CPU).

Without --backend the chip's default backend is timed (metal, cuda or cpu), as the committed GPU
baselines were. The 4-bit rows are judged against mlx_lm's quantized SDPA: without mlx_lm they
would have no gauge and be judged by their time alone, which on a shared CPU fails unchanged code,
so the run refuses to start without it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "ci"
sys.path.insert(0, str(ROOT))

from fusedattend.benchmarks import perf_compare  # noqa: E402

# NIGHTLY_SUBSET=small: one call a row, B = 1, every S of the chip's grid (3 on a CPU, 4 on a GPU).
SMALL = ["-k", "test_decode and not loop and B1-"]
# Not benchmark rows: the cpu-contention test times its own pair with a loader for minutes.
IGNORED = ["--ignore=tests/perf/test_cpu_contention.py"]


def log(*args):
    print("nightly:", *args, flush=True)


def limits_for(chip: str) -> dict:
    """ci/perf.sh's limits for this chip, with its environment overrides (percent, µs)."""
    cpu = chip.startswith("cpu-")
    pct = perf_compare.percent
    return {"fail": pct(os.environ.get("PERF_FAIL") or ("50" if cpu else "25")),
            "host_bound_fail": pct(os.environ.get("PERF_HOST_FAIL") or ("50" if cpu else "60")),
            "host_bound_us": float(os.environ.get("PERF_HOST_US") or (0 if cpu else 75))}


def subset_args(subset: str | None) -> list:
    if not subset:
        return []
    return SMALL if subset == "small" else ["-k", subset]


def newest_baseline(storage: Path):
    """perf_compare's newest baseline, or None where the chip has none yet (a first run)."""
    runs = perf_compare.saved_runs(storage)
    return runs[-1] if runs else None


# ---------------------------------------------------------------------------------------- timing

def pytest_command(targets, json_path: Path, options) -> list:
    return [sys.executable, "-m", "pytest", *targets, "-m", "perf", "-p", "no:xdist", "-p", "nightly_warmup",
            "-q", *IGNORED, f"--benchmark-json={json_path}", "--benchmark-columns=median,iqr,rounds", *options]


def time_passes(targets, options, folder: Path, passes: int):
    """Runs the perf tests `passes` times; (merged run, pytest's status: 0 when every pass passed)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(CI), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    # Started from a pytest-xdist worker (a test of this script), pytest-benchmark would read the
    # worker's variables and disable itself.
    for name in [k for k in env if k.startswith("PYTEST_XDIST_")]:
        del env[name]
    paths = []
    for i in range(1, passes + 1):
        path = folder / f"pass-{i}.json"
        command = pytest_command(targets, path, options)
        log(f"pass {i} of {passes}:", " ".join(command[1:]))
        start = time.monotonic()
        status = subprocess.run(command, cwd=ROOT, env=env).returncode
        log(f"pass {i} took {time.monotonic() - start:.0f} s (pytest exit {status})")
        if status == 0 and not (path.exists() and json.loads(path.read_text()).get("benchmarks")):
            log(f"pytest-benchmark wrote no row to {path} (disabled?)")
            status = 3
        if status != 0:
            return None, status
        paths.append(path)
    return merge_passes(paths), 0


def merge_passes(paths) -> dict:
    """One pytest-benchmark run from several of the same tests: per row the median of the passes'
    medians (and quartiles), the extremes of their extremes, and the median of each peer ratio;
    extra_info keeps each pass's median (nightly_pass_medians) and ratios (nightly_pass_ratio_*)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    merged = copy.deepcopy(runs[0])
    by_name = [{b["name"]: b for b in run["benchmarks"]} for run in runs]
    for bench in merged["benchmarks"]:
        same = [run[bench["name"]] for run in by_name if bench["name"] in run]
        stats = [b["stats"] for b in same]
        s = bench["stats"]
        for key in ("median", "q1", "q3", "iqr"):
            s[key] = statistics.median(x[key] for x in stats)
        s["min"] = min(x["min"] for x in stats)
        s["max"] = max(x["max"] for x in stats)
        s["mean"] = statistics.fmean(x["mean"] for x in stats)
        s["stddev"] = statistics.fmean(x["stddev"] for x in stats)
        s["rounds"] = sum(x["rounds"] for x in stats)
        s["total"] = sum(x["total"] for x in stats)
        s["ops"] = 1 / s["mean"] if s["mean"] else 0
        info = bench["extra_info"]
        for key in [k for k in info if k.startswith("ratio_")]:
            values = [b["extra_info"][key] for b in same if key in b["extra_info"]]
            info[key] = statistics.median(values)
            info[f"nightly_pass_{key}"] = values
        info["nightly_pass_medians"] = [x["median"] for x in stats]
        if info.get("kv_bytes"):
            info["gbps"] = info["kv_bytes"] / (s["median"] / info.get("calls_per_round", 1)) / 1e9
    merged["nightly"] = {"passes": len(runs)}
    return merged


# ------------------------------------------------------------------------------------- baselines

def machine_folder() -> str:
    """pytest-benchmark's folder name for this machine (its storage layout: <chip>/<this>/NNNN_<chip>.json)."""
    from pytest_benchmark.utils import get_machine_id

    return get_machine_id()


def save_baseline(run_path: Path, storage: Path, chip: str, replace: bool = False) -> Path:
    """Saves a run as the chip's next-numbered baseline under `storage`; with `replace`, removes the
    older ones (one baseline a chip is committed; git history keeps the others)."""
    older = perf_compare.saved_runs(storage)
    numbers = [int(m.group(1)) for p in older if (m := re.match(r"(\d+)_", p.name))]
    path = storage / machine_folder() / f"{max(numbers, default=0) + 1:04d}_{chip}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_path, path)
    if replace:
        for p in older:
            p.unlink()
    return path


# ------------------------------------------------------------------------------------- judgement

def judge(baseline: Path, run: Path, limits: dict):
    """perf_compare's verdict, as ci/perf.sh compare prints it: (lines, failed names, rows shared)."""
    return perf_compare.compare(
        perf_compare.per_call_medians(baseline), perf_compare.per_call_medians(run), limits["fail"],
        limits["host_bound_fail"], limits["host_bound_us"] * 1e-6,
        perf_compare.gauge_ratios(baseline), perf_compare.gauge_ratios(run))


def _benchmarks(path):
    return {b["name"]: b for b in json.loads(Path(path).read_text())["benchmarks"]} if path else {}


def _spread_us(bench):
    """(low, high) µs a call: the passes' medians where the run was merged, else the quartiles."""
    calls = bench["extra_info"].get("calls_per_round", 1)
    medians = bench["extra_info"].get("nightly_pass_medians")
    if medians and len(medians) > 1:
        return min(medians) / calls * 1e6, max(medians) / calls * 1e6
    return bench["stats"]["q1"] / calls * 1e6, bench["stats"]["q3"] / calls * 1e6


def _order(bench):
    """Rows in the order of the grid: test, backend, format, B, then S as numbers."""
    info = bench["extra_info"]
    return (bench["name"].split("[")[0], str(info.get("backend")), str(info.get("format")), str(info.get("kind")),
            info.get("B") or 0, info.get("S") or 0, bench["name"])


def rows_of(baseline: Path, run: Path, again: Path | None, failed_once, failed, limits) -> list:
    """A row a benchmark: both sides' µs a call, the time and gauge ratios, the spread, the verdict."""
    base, now, retimed = _benchmarks(baseline), _benchmarks(run), _benchmarks(again)
    base_gauges = perf_compare.gauge_ratios(baseline) if baseline else {}
    rows = []
    for name in sorted(base.keys() | now.keys(), key=lambda n: _order((now.get(n) or base[n]))):
        b, r = base.get(name), retimed.get(name, now.get(name))
        info = (r or b)["extra_info"]
        row = {"name": name, "test": name.split("[")[0], "backend": info.get("backend"), "format": info.get("format"),
               "B": info.get("B"), "S": info.get("S"), "kind": info.get("kind"), "retimed": name in retimed}
        if r is not None:
            row["run_us"] = perf_compare.per_call_median(r) * 1e6
            row["run_spread_us"] = _spread_us(r)
            row["peer_ratios"] = {k[len("ratio_"):]: v for k, v in r["extra_info"].items() if k.startswith("ratio_")}
        if b is not None:
            row["baseline_us"] = perf_compare.per_call_median(b) * 1e6
            row["baseline_spread_us"] = _spread_us(b)
        if b is None or r is None:
            row["verdict"] = "no baseline" if b is None else "not run"
            rows.append(row)
            continue
        row["ratio"] = row["run_us"] / row["baseline_us"]
        host_bound = b["stats"]["median"] / b["extra_info"].get("calls_per_round", 1) < limits["host_bound_us"] * 1e-6
        row["limit"] = 1 + (limits["host_bound_fail"] if host_bound else limits["fail"]) / 100
        row["host_bound"] = host_bound
        run_gauges = {p: v for p, v in row["peer_ratios"].items() if p in perf_compare.HOST_GAUGES}
        gauge = perf_compare.against_gauge(base_gauges.get(name, {}), run_gauges)
        row["gauge"], row["gauge_ratio"] = gauge if gauge else (None, None)
        if row["retimed"]:  # the first timing, which sent the row to be timed again
            first = now[name]
            first_gauges = perf_compare.gauge_ratios(run).get(name, {})
            row["first_ratio"] = perf_compare.per_call_median(first) * 1e6 / row["baseline_us"]
            first_gauge = perf_compare.against_gauge(base_gauges.get(name, {}), first_gauges)
            row["first_gauge_ratio"] = first_gauge[1] if first_gauge else None
        if name in failed:
            row["verdict"] = "FAIL"
        elif name in failed_once:
            row["verdict"] = "ok when timed again"
        else:
            row["verdict"] = "ok"
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------- report

STATUS_LINE = {
    "pass": "within limits",
    "regression": "REGRESSION",
    "first-baseline": "first baseline recorded",
    "no-common-rows": "no row in common with the baseline",
    "pytest-failed": "a perf test failed",
}


def _us(value):
    return "-" if value is None else f"{value:,.1f}"


def _x(value):
    return "-" if value is None else f"{value:.2f}x"


def summary_markdown(report: dict) -> str:
    rows, lim = report["rows"], report["limits"]
    lines = [f"## Nightly perf on `{report['chip']}`: {STATUS_LINE[report['status']]}", ""]
    if report["status"] == "first-baseline":
        lines += [f"No baseline for `{report['chip']}` under `{report['storage']}`: this run is its first, saved as "
                  f"`{report['saved_baseline']}`. Commit it in a pull request (docs/ci.md, \"Promoting a baseline\"); "
                  "later runs are compared with it.", ""]
        policy = report.get("policy") or {}
        if policy.get("status") == "written":
            lines += [f"Its first schedule policy is `{policy['file']}` (log `{policy['log']}`): commit it as "
                      f"`{policy['target']}` in the same pull request.", ""]
        elif policy.get("status") == "failed":
            lines += [f"Tuning its schedule failed: {policy['why']}.", ""]
    elif report.get("baseline"):
        lines.append(f"- baseline: `{report['baseline']}` (commit {report['baseline_commit']}, {report['baseline_date']})")
    lines += [f"- this run: commit {report['run_commit']}, mlx {report['mlx']}, device {report['device']}, "
              f"{report['passes']} pass(es) of pytest-benchmark{', judged from ' + report['replayed'] if report.get('replayed') else ''}",
              f"- limits: {lim['fail']:g}% slower"
              + (f" ({lim['host_bound_fail']:g}% for rows under {lim['host_bound_us']:g} µs a call)" if lim["host_bound_us"] else "")
              + ", by time and against the gauge (the peer timed beside the row) both; "
              + ("a saved run, judged once" if report.get("replayed") else "a row slow once is timed again")]
    if report.get("message"):
        lines += ["", report["message"]]
    compared = [r for r in rows if "ratio" in r]
    if compared:
        failed = [r for r in compared if r["verdict"] == "FAIL"]
        again = [r for r in compared if r["retimed"]]
        lines += ["", f"{len(compared)} rows compared: {len(failed)} slower than allowed"
                  + (f", {len(again)} timed again" if again else "") + "."]
        no_gauge = [r["name"] for r in compared if r["gauge"] is None]
        if no_gauge:
            lines.append(f"Judged by time alone (no peer timed beside them in both runs): {', '.join(no_gauge)}.")
    lines += ["", "| row | baseline µs | this run µs | spread µs | time | gauge | vs gauge | limit | verdict |",
              "|---|---:|---:|---|---:|---|---:|---:|---|"]
    not_run = [r for r in rows if r["verdict"] == "not run"]
    for r in rows:
        if r in not_run:
            continue
        spread = "–".join(f"{v:,.0f}" if v >= 100 else f"{v:.1f}" for v in r["run_spread_us"]) if "run_spread_us" in r else "-"
        verdict = r["verdict"]
        if r["retimed"]:
            verdict += (" (slow twice" if verdict == "FAIL" else " (") + \
                f"; first {_x(r.get('first_ratio'))}, {_x(r.get('first_gauge_ratio'))} against the gauge)"
        lines.append(f"| `{r['name']}` | {_us(r.get('baseline_us'))} | {_us(r.get('run_us'))} | {spread} | "
                     f"{_x(r.get('ratio'))} | {r.get('gauge') or '-'} | {_x(r.get('gauge_ratio'))} | "
                     f"{_x(r.get('limit'))} | {verdict} |")
    if not_run:
        lines += ["", f"{len(not_run)} rows of the baseline not in this run (a subset)."]
    lines += ["", "Spread: the lowest and highest of the passes' medians (one pass: the quartiles). "
              "`vs gauge`: how many times slower the row got against its peer; "
              "a row fails only past its limit by both. A row timed again shows its second timing. "
              "Plot: `nightly.png` beside this summary (in the workflow's artifact)."]
    if report.get("compare_log"):
        lines += ["", "<details><summary>perf_compare</summary>", "", "```", report["compare_log"].rstrip(), "```",
                  "", "</details>"]
    return "\n".join(lines) + "\n"


def plot(rows, path: Path, title: str) -> bool:
    """µs a call against S, one panel per test and format, a line per backend and B: this run solid
    (bars: the passes' spread), the baseline dashed. False where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not importable: no plot written")
        return False
    rows = [r for r in rows if r.get("S") and r["verdict"] != "not run"]
    panels = sorted({(r["test"], r["format"] or "", r.get("kind") or "") for r in rows})
    if not panels:
        return False
    cols = min(2, len(panels))
    n_rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(n_rows, cols, figsize=(6.5 * cols, 4.2 * n_rows), squeeze=False)
    for ax, (test, fmt, kind) in zip(axes.flat, panels):
        mine = [r for r in rows if (r["test"], r["format"] or "", r.get("kind") or "") == (test, fmt, kind)]
        lines = sorted({(r["backend"], r["B"]) for r in mine}, key=str)
        for i, (backend, B) in enumerate(lines):
            color = f"C{i % 10}"
            pts = sorted((r for r in mine if (r["backend"], r["B"]) == (backend, B)), key=lambda r: r["S"])
            now = [r for r in pts if "run_us" in r]
            if now:
                low = [r["run_us"] - r["run_spread_us"][0] for r in now]
                high = [r["run_spread_us"][1] - r["run_us"] for r in now]
                ax.errorbar([r["S"] for r in now], [r["run_us"] for r in now], yerr=[low, high], color=color,
                            marker="o", capsize=3, label=f"{backend} B={B}: this run")
            base = [r for r in pts if "baseline_us" in r]
            if base:
                ax.plot([r["S"] for r in base], [r["baseline_us"] for r in base], color=color, linestyle="--",
                        marker="x", label=f"{backend} B={B}: baseline")
            for r in now:
                if r["verdict"] == "FAIL":
                    ax.annotate("FAIL", (r["S"], r["run_us"]), color="red", textcoords="offset points", xytext=(4, 4))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("S (keys)")
        ax.set_ylabel("µs a call")
        ax.set_title(f"{test} {fmt}{' ' + kind if kind else ''}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _commit(info):
    commit = (info or {}).get("commit_info") or {}
    cid = commit.get("id") or "?"
    return cid[:10] + ("+dirty" if commit.get("dirty") else "")


def write_report(report: dict, out: Path):
    rows = report["rows"]
    report["plot"] = "nightly.png" if plot(rows, out / "nightly.png",
                                           f"{report['chip']}: {STATUS_LINE[report['status']]}") else None
    text = summary_markdown(report)
    (out / "summary.md").write_text(text)
    (out / "nightly.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as f:
            f.write(text)
    log(f"wrote {out / 'summary.md'}, {out / 'nightly.json'}" + (f", {out / 'nightly.png'}" if report["plot"] else ""))


# ------------------------------------------------------------------------------------------ policy

TUNE_COMMAND = [sys.executable, "-m", "fusedattend", "tune"]


def first_policy(chip: str, out: Path, on_gpu: bool):
    """A first baseline on a GPU chip with no policy file of its own also tunes its schedule:
    `python -m fusedattend tune` writes out/policy.json, promoted by a pull request into
    fusedattend/gpu/policies/<chip>.json. NIGHTLY_TUNE: `auto` (default: on a GPU without a
    policy), `1` (always), `0` (never); NIGHTLY_TUNE_S: its budget in seconds (default 600).
    Returns what happened, for the report and summary; a failed tune fails nothing else."""
    from fusedattend.gpu import schedule

    mode = os.environ.get("NIGHTLY_TUNE", "auto").strip() or "auto"
    if mode not in ("auto", "0", "1"):
        return {"status": "skipped", "why": f"NIGHTLY_TUNE must be auto, 0 or 1, got {mode!r}"}
    existing = schedule.chip_policy_path(chip)
    if mode == "0" or (mode == "auto" and (not on_gpu or existing.exists())):
        why = "NIGHTLY_TUNE=0" if mode == "0" else ("no GPU" if not on_gpu else f"{existing} exists")
        return {"status": "skipped", "why": why}
    path = out / "policy.json"
    command = TUNE_COMMAND + ["--budget", os.environ.get("NIGHTLY_TUNE_S") or "600", "--out", str(path)]
    log("tuning this chip's schedule: " + " ".join(command[1:]))
    with open(out / "tune.log", "w") as log_file:
        code = subprocess.run(command, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT).returncode
    if code != 0 or not path.exists():
        return {"status": "failed", "why": f"tune exited {code} (tune.log)", "log": "tune.log"}
    return {"status": "written", "file": "policy.json", "log": "tune.log", "target": str(existing)}


# ------------------------------------------------------------------------------------------ main

def run(options) -> int:
    from fusedattend.chip import chip_id

    chip = os.environ.get("NIGHTLY_CHIP") or chip_id()
    storage = Path(os.environ.get("NIGHTLY_STORAGE") or ROOT / "tests/perf/baselines" / chip)
    out = Path(os.environ.get("NIGHTLY_OUT") or ROOT / "build/nightly")
    try:
        passes = int(os.environ.get("NIGHTLY_PASSES") or 3)
        again_passes = int(os.environ.get("NIGHTLY_AGAIN_PASSES") or 2 * passes)
    except ValueError as err:
        log(f"NIGHTLY_PASSES and NIGHTLY_AGAIN_PASSES are whole numbers: {err}")
        return 2
    replay = os.environ.get("NIGHTLY_RUN")
    if passes < 1 or again_passes < 1:
        log("NIGHTLY_PASSES and NIGHTLY_AGAIN_PASSES must be at least 1")
        return 2
    try:
        import mlx_lm  # noqa: F401  (the 4-bit rows' gauge: mlx_lm's quantized SDPA)
    except ImportError:
        log("mlx_lm is not importable: the 4-bit rows would have no peer to judge them by (pip install -e '.[test]')")
        return 2
    import mlx.core as mx

    import fusedattend as fa

    if out.exists():  # a run's files only: none left from an earlier one
        for name in ("passes", "again"):
            shutil.rmtree(out / name, ignore_errors=True)
        for name in ("run.json", "run.again.json", "baseline.json", "summary.md", "nightly.json", "nightly.png"):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if "--backend" not in " ".join(options):
        options = ["--backend", fa.default_backend(), *options]
    options = subset_args(os.environ.get("NIGHTLY_SUBSET")) + list(options)
    limits = limits_for(chip)
    baseline = newest_baseline(storage)
    log(f"chip {chip}; baseline {baseline or 'none'}; output {out}")
    report = {"chip": chip, "storage": str(storage), "limits": limits, "passes": passes, "pytest_options": options,
              "mlx": mx.__version__, "device": str(mx.default_device()), "rows": [], "replayed": replay}

    run_path = out / "run.json"
    if replay:
        shutil.copyfile(replay, run_path)
        report["passes"] = json.loads(run_path.read_text()).get("nightly", {}).get("passes", 1)
    else:
        merged, status = time_passes(["tests/perf"], options, out / "passes", passes)
        if merged is None:
            report.update(status="pytest-failed", exit_code=status,
                          message={5: "pytest selected no perf row", 3: "pytest-benchmark timed no row"}.get(
                              status, f"pytest exited {status}"))
            write_report(report, out)
            return status
        run_path.write_text(json.dumps(merged, indent=1) + "\n")
    run_data = json.loads(run_path.read_text())
    report["run_commit"] = _commit(run_data)

    if baseline is None:
        saved = save_baseline(run_path, storage, chip)
        shutil.copyfile(saved, out / "baseline.json")
        report.update(status="first-baseline", exit_code=0, saved_baseline=str(saved),
                      rows=rows_of(None, run_path, None, [], [], limits))
        log(f"no baseline for {chip}: recorded the first, {saved}")
        report["policy"] = first_policy(chip, out, on_gpu=mx.default_device() == mx.gpu)
        write_report(report, out)
        return 0

    shutil.copyfile(baseline, out / "baseline.json")
    base_data = json.loads(baseline.read_text())
    report.update(baseline=str(baseline), baseline_commit=_commit(base_data), baseline_date=base_data.get("datetime"))
    lines, failed_once, shared = judge(baseline, run_path, limits)
    log_text = f"against {baseline}\n" + "\n".join(lines) + "\n"
    print(log_text, end="")
    failed, again_path = list(failed_once), None
    if failed_once and not replay:
        log(f"{len(failed_once)} rows slower than allowed: timing them again")
        fullnames = [b["fullname"] for b in run_data["benchmarks"] if b["name"] in failed_once]
        merged, status = time_passes(fullnames, options, out / "again", again_passes)
        if merged is None:
            report.update(status="pytest-failed", exit_code=status, message=f"pytest exited {status} timing again")
            write_report(report, out)
            return status
        again_path = out / "run.again.json"
        again_path.write_text(json.dumps(merged, indent=1) + "\n")
        lines, failed, _ = judge(baseline, again_path, limits)
        again_text = "timed again:\n" + "\n".join(line for line in lines if not line.endswith(("not run", "no baseline")))
        print(again_text)
        log_text += again_text + "\n"
        failed = [name for name in failed if name in failed_once]
    report["compare_log"] = log_text
    report["rows"] = rows_of(baseline, run_path, again_path, failed_once, failed, limits)
    if shared == 0:
        report.update(status="no-common-rows", exit_code=1,
                      message="The run shares no row with the baseline: a subset the baseline lacks?")
    elif failed:
        report.update(status="regression", exit_code=1,
                      message=f"{len(failed)} of {shared} rows slower than allowed"
                              f"{', twice' if again_path else ''}: {', '.join(failed)}")
    else:
        report.update(status="pass", exit_code=0)
    write_report(report, out)
    log(STATUS_LINE[report["status"]])
    return report["exit_code"]


def promote(argv) -> int:
    p = argparse.ArgumentParser(prog="python ci/nightly.py promote",
                                description="save a nightly run (run.json) as its chip's new baseline, "
                                            "replacing the older one (git history keeps it)")
    p.add_argument("run", type=Path, help="a nightly run.json (the workflow's artifact holds it)")
    p.add_argument("--storage", type=Path, help="the chip's baseline folder (default tests/perf/baselines/<its chip>)")
    args = p.parse_args(argv)
    data = json.loads(args.run.read_text())
    chip = data["machine_info"]["fusedattend"]["chip"]
    saved = save_baseline(args.run, args.storage or ROOT / "tests/perf/baselines" / chip, chip, replace=True)
    print(f"{saved}: commit it (git add -A {saved.parent.parent}) and open a pull request")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["promote"]:
        return promote(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
