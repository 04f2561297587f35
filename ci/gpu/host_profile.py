"""Where the host time of a small decode call goes: cProfile over queued calls.

    python ci/gpu/host_profile.py [B S]     # default B=1, S=2048 (bf16, H_q=32, H_kv=8, D=128)

At small shapes a call is bound by host time (docs/gpu.md), so this profiles 100 rounds of
20 queued calls + mx.eval, for fa.decode_attention and for mx.fast.scaled_dot_product_attention,
and prints µs per call of the top functions. MLX's C++ functions do not show by name: their
time is the own time of the Python line that calls them (`rounds` holds mx.eval).
Writes $OUT/host_profile_B_S.txt.
"""
import cProfile
import io
import os
import pstats
import sys

import mlx.core as mx

import fusedattend as fa

sys.path.insert(0, os.path.dirname(__file__))
from schedule_sweep import decode_inputs  # noqa: E402

ROUNDS, QUEUED = 100, 20


def profile(label, fn, out):
    for _ in range(3):
        mx.eval([fn() for _ in range(QUEUED)])
    def rounds():  # a profiled frame, so that mx.eval's time shows as its own time
        for _ in range(ROUNDS):
            mx.eval([fn() for _ in range(QUEUED)])

    prof = cProfile.Profile()
    prof.runcall(rounds)
    stats = pstats.Stats(prof)
    calls = ROUNDS * QUEUED
    out.write(f"\n## {label}: {stats.total_tt / calls * 1e6:.1f} us of wall time per call under the profiler (it inflates small Python functions)\n")
    out.write("   us/call (own)   us/call (with callees)   function\n")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:18]
    for (file, line, name), (_, _, tottime, cumtime, _) in rows:
        where = name if file == "~" else f"{os.path.basename(file)}:{line}({name})"
        out.write(f"   {tottime / calls * 1e6:12.2f}   {cumtime / calls * 1e6:22.2f}   {where}\n")


def main():
    B, S = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (1, 2048)
    q, k, v = decode_inputs(B, S)
    out = io.StringIO()
    profile("fa.decode_attention", lambda: fa.decode_attention(q, k, v, backend="cuda"), out)
    profile("mx.fast.scaled_dot_product_attention",
            lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5), out)
    print(out.getvalue())
    with open(os.path.join(os.environ.get("OUT", "."), f"host_profile_{B}_{S}.txt"), "w") as f:
        f.write(f"B={B} S={S} bf16 H_q=32 H_kv=8 D=128, {ROUNDS} rounds of {QUEUED} queued calls\n")
        f.write(out.getvalue())


if __name__ == "__main__":
    main()
