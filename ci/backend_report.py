#!/usr/bin/env python3
"""A CI job's summary of one backend: did its kernels compile and run here, which MLX, which device.

    python ci/backend_report.py --backend metal --step check=success --step property=failure

Prints markdown and appends it to $GITHUB_STEP_SUMMARY when that is set (the parity gate's jobs
run it last, `if: always()`). It probes the backend with one small call of each entry point
(decode_attention in bfloat16, quantized_decode_attention at 4 bits) and compares each with the
reference backend; "compiled and ran" means both calls returned finite outputs within 2e-2 of
the reference's. --step NAME=OUTCOME lines (the workflow's `steps.<id>.outcome`) are listed as
they are. Exits 0 whatever it finds: the job's own steps pass or fail the job.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import traceback


def probe(backend: str):
    """(ok, what happened): one small call of each entry point on `backend` against the reference."""
    import mlx.core as mx
    import numpy as np

    import fusedattend as fa

    if backend not in fa.available_backends():
        return False, f"backend `{backend}` not available here (available: {', '.join(fa.available_backends())})"
    rng = np.random.default_rng(0)
    B, H_q, H_kv, S, D = 1, 4, 2, 1100, 64  # past the cpu backend's hand-over to the reference (2^17 K/V elements)
    q = mx.array(rng.standard_normal((B, H_q, 1, D)), dtype=mx.bfloat16)
    k = mx.array(rng.standard_normal((B, H_kv, S, D)), dtype=mx.bfloat16)
    v = mx.array(rng.standard_normal((B, H_kv, S, D)), dtype=mx.bfloat16)
    notes = []
    try:
        pairs = [("decode_attention, bfloat16",
                  lambda name: fa.decode_attention(q, k, v, scale=D ** -0.5, backend=name))]
        kq, vq = fa.quantize_kv(k, bits=4, group_size=64), fa.quantize_kv(v, bits=4, group_size=64)
        pairs.append(("quantized_decode_attention, 4-bit",
                      lambda name: fa.quantized_decode_attention(q, kq, vq, scale=D ** -0.5, bits=4, group_size=64,
                                                                 backend=name)))
        ok = True
        for what, call in pairs:
            ours = np.array(call(backend).astype(mx.float32))
            ref = np.array(call("reference").astype(mx.float32))
            err = float(np.max(np.abs(ours - ref)))
            good = bool(np.all(np.isfinite(ours))) and err <= 2e-2
            ok &= good
            notes.append(f"{what}: {'ok' if good else 'WRONG'} (max |ours - reference| {err:.2e})")
        return ok, "; ".join(notes)
    except Exception as err:  # a kernel that does not compile raises here
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return False, "; ".join(notes + [f"raised {last[:500]}"])


def device_lines(backend: str):
    import mlx.core as mx

    lines = [f"- MLX {mx.__version__}; default device {mx.default_device()}"]
    try:
        import mlx_lm

        lines[0] += f"; mlx_lm {mlx_lm.__version__}"
    except ImportError:
        pass
    if backend == "metal":
        lines.append(f"- mx.metal.is_available(): {mx.metal.is_available()}")
    if backend == "cuda":
        lines.append(f"- mx.cuda.is_available(): {getattr(mx, 'cuda', None) and mx.cuda.is_available()}")
    try:
        info = mx.device_info() if mx.default_device() == mx.gpu else {}
    except Exception:
        info = {}
    if info:
        keep = ("device_name", "architecture", "memory_size", "max_recommended_working_set_size", "total_memory")
        lines.append("- device: " + ", ".join(f"{key} {info[key]}" for key in keep if key in info))
    lines.append(f"- host: {platform.platform()}, Python {platform.python_version()}")
    return lines


def report(backend: str, steps) -> str:
    import fusedattend as fa
    from fusedattend.chip import chip_id

    ok, notes = probe(backend)
    word = {"metal": "Metal", "cuda": "CUDA"}.get(backend, backend)
    lines = [f"## `{backend}` on {os.environ.get('RUNNER_OS', platform.system())} ({chip_id()})", "",
             f"- {word} kernels compiled and ran: **{'yes' if ok else 'no'}**: {notes}",
             f"- fusedattend {fa.__version__}; backends here: {', '.join(fa.available_backends())}",
             *device_lines(backend)]
    if steps:
        lines += ["", "| step | outcome |", "|---|---|"] + [f"| {name} | {outcome} |" for name, outcome in steps]
    return "\n".join(lines) + "\n"


def _step(text):
    name, sep, outcome = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=OUTCOME, got {text!r}")
    return name, outcome or "not run"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python ci/backend_report.py", description=__doc__.split("\n")[0])
    p.add_argument("--backend", required=True, help="reference, cpu, metal or cuda")
    p.add_argument("--step", type=_step, action="append", default=[], metavar="NAME=OUTCOME",
                   help="a step's outcome to list (repeatable)")
    args = p.parse_args(argv)
    text = report(args.backend, args.step)
    print(text, end="")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
