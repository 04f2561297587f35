"""What the CUDA build of one decode launch costs in registers and instructions, without a GPU.

Answers: how many registers and spill bytes ptxas gives a schedule's decode kernel, which SASS
opcodes it holds, and how long each loop is (a branch back to an earlier address), longest first
(a kernel's main loop is the longest). It compiles the launch as mx.fast.cuda_kernel would for the
H200 (sm_90; tests/kernels/nvcc_wrap.py), from the sources sources.kernel_dir() holds now, under
the shipped Policy with the fields `--set` names replaced. Needs nvcc, and cuobjdump + nvdisasm on
PATH (the pip wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry them). From the
repository root:

    python tools/sass_stats.py --S 32768 --quantized --set quantized_mma_threadgroups_per_sm=0
    python tools/sass_stats.py --S 8192 --set key_bytes_in_flight=64 --sass /tmp/k.sass
"""

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from fusedattend import gpu, quantize_kv  # noqa: E402
from fusedattend._problem import plain_problem, quantized_problem  # noqa: E402
from fusedattend.gpu import schedule, sources  # noqa: E402
from tests.kernels import nvcc_wrap  # noqa: E402


def policy_of(settings) -> schedule.Policy:
    """Policy() with each NAME=VALUE of `settings` (Policy field names; ints, or true / false)."""
    values = {}
    for item in settings:
        name, sep, text = item.partition("=")
        if not sep or name not in schedule.POLICY_FIELDS:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE with a Policy field, one of "
                             + ", ".join(schedule.POLICY_FIELDS))
        if schedule.POLICY_FIELDS[name] == "bool":
            if text.lower() not in ("true", "false", "1", "0"):
                raise SystemExit(f"--set {item!r}: {name} takes true or false")
            values[name] = text.lower() in ("true", "1")
        elif not text.isdigit():
            raise SystemExit(f"--set {item!r}: {name} takes a non-negative integer")
        else:
            values[name] = int(text)
    return schedule.Policy(**values)


def cuda_sass(launch):
    """(ptxas' -v log, cuobjdump's SASS listing) of a gpu.decode_launch() dict, as MLX would
    compile it for sm_90, from the sources sources.kernel_dir() holds now (CUDA's form: the caller
    makes sources.on_metal() false)."""
    text = nvcc_wrap.wrap_launch(launch)
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(text)
        build = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", str(cubin),
                                str(cu)], capture_output=True, text=True, check=True)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return build.stderr, sass


def instructions(sass):
    """(address, opcode, branch target or None) of each SASS instruction, in order."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)[^;]*?(?:\s(0x[0-9a-f]+))?\s*;", line)
        if m:
            target = int(m.group(3), 16) if m.group(2) == "BRA" and m.group(3) else None
            out.append((int(m.group(1), 16), m.group(2), target))
    return out


def loops(code):
    """(first, last) address of each loop body, longest first; a count includes the rarely taken
    paths inside the loop (a rescale)."""
    return sorted(((target, at) for at, op, target in code if target is not None and target < at),
                  key=lambda r: r[1] - r[0], reverse=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="replace a field of the shipped Policy (fusedattend/gpu/schedule.py), e.g. simdgroups=8")
    p.add_argument("--D", type=int, default=128)
    p.add_argument("--H_kv", type=int, default=8, help="kv heads, with H_q = 32: the GQA group size")
    p.add_argument("--S", type=int, default=64, help="keys: past the policy's single_pass_max_s the split kernel")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--mask", default=None, choices=["causal"], help="default: none")
    p.add_argument("--quantized", action="store_true", help="quantized K/V (--bits, --group_size)")
    p.add_argument("--bits", type=int, default=4, choices=[2, 4, 8])
    p.add_argument("--group_size", type=int, default=64, choices=[32, 64, 128])
    p.add_argument("--sass", metavar="FILE", help="also write the whole SASS listing there")
    args = p.parse_args()
    policy = policy_of(args.set)
    sources.on_metal = lambda: False  # the CUDA form, whatever this machine has
    q = mx.zeros((1, 32, 1, args.D), dtype=getattr(mx, args.dtype))
    k = mx.zeros((1, args.H_kv, args.S, args.D), dtype=q.dtype)
    if args.quantized:
        kq = quantize_kv(k, bits=args.bits, group_size=args.group_size)
        problem = quantized_problem(q, kq, kq, None, args.mask, None, args.bits, args.group_size)
    else:
        problem = plain_problem(q, k, k, None, args.mask, None)
    launch = gpu.decode_launch(problem, quantized=args.quantized, policy=policy)
    ptxas_log, sass = cuda_sass(launch)
    if args.sass:
        Path(args.sass).write_text(sass)
    print(launch["name"], launch["body_file"], "launch bounds", launch["launch_bounds"])
    print(launch["constants"])
    print("\n".join(line for line in ptxas_log.splitlines() if "registers" in line or "spill" in line))
    code = instructions(sass)
    ops = collections.Counter(op for _, op, _ in code)
    print(f"{len(code)} SASS instructions:", ", ".join(f"{k} {v}" for k, v in ops.most_common(20)))
    for start, end in loops(code):
        body = collections.Counter(op for at, op, _ in code if start <= at <= end)
        print(f"loop {start:#x}-{end:#x}: {sum(body.values())} instructions:",
              ", ".join(f"{k} {v}" for k, v in body.most_common(12)))


if __name__ == "__main__":
    main()
