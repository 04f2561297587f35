"""Where a chained small call's time goes on the GPU's timeline: run under Nsight Systems, then
read its kernel trace.

    nsys profile -t cuda -o OUT/chain python ci/gpu/chain_trace.py run B S
    nsys stats -r cuda_gpu_trace -f csv -o OUT/chain OUT/chain.nsys-rep
    python ci/gpu/chain_trace.py read OUT/chain_cuda_gpu_trace.csv

`run`: for each op (fused bf16, fused 4-bit, mx.fast.scaled_dot_product_attention; H_q = 32,
H_kv = 8, D = 128, L = 1), 10 warm-up rounds, then ROUNDS rounds of 20 chained calls (each
call's query the previous call's output) evaluated together, the rounds marked by a tiny
kernel of their own (mx.abs on one float: "abs" in the trace) so that `read` can cut them apart.
`read`: per op, µs per call of wall span (first kernel start to last kernel end in a round),
of kernel time (the sum of kernel durations) and of the gaps between them, with the kernels
per call. A span much longer than its kernels is time the GPU waited for the host.
"""
import csv
import sys

ROUNDS = 5
CALLS = 20
OPS = ("bf16", "q4", "sdpa")


def run(B, S):
    import mlx.core as mx

    import fusedattend as fa

    q = mx.random.normal((B, 32, 1, 128)).astype(mx.bfloat16)
    k = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    v = mx.random.normal((B, 8, S, 128)).astype(mx.bfloat16)
    kq, vq = fa.quantize_kv(k), fa.quantize_kv(v)
    marker = mx.zeros((1,))
    mx.eval(q, k, v, kq, vq, marker)
    ops = {
        "bf16": lambda x: fa.decode_attention(x, k, v, backend="cuda"),
        "q4": lambda x: fa.quantized_decode_attention(x, kq, vq, backend="cuda"),
        "sdpa": lambda x: mx.fast.scaled_dot_product_attention(x, k, v, scale=128 ** -0.5),
    }
    for name in OPS:
        op = ops[name]
        for r in range(10 + ROUNDS):
            x = q
            for _ in range(CALLS):
                x = op(x)
            mx.eval(x)
            mx.eval(mx.abs(marker))  # a round's end, in the trace
        print(f"chain_trace: {name} done", flush=True)


def read(path):
    rows = list(csv.DictReader(open(path)))
    kernels = [(int(r["Start (ns)"]), int(r["Duration (ns)"]), r["Name"]) for r in rows if "Name" in r]
    kernels.sort()
    rounds, current = [], []
    for start, duration, name in kernels:
        if "abs" in name.lower():
            rounds.append(current)
            current = []
        else:
            current.append((start, duration, name))
    per_op = len(rounds) // len(OPS)
    for i, op in enumerate(OPS):
        timed = rounds[i * per_op:(i + 1) * per_op][-ROUNDS:]
        spans, busy, counts = [], [], []
        for ks in timed:
            if not ks:
                continue
            spans.append((ks[-1][0] + ks[-1][1] - ks[0][0]) / CALLS / 1e3)
            busy.append(sum(d for _, d, _ in ks) / CALLS / 1e3)
            counts.append(len(ks) / CALLS)
        span, kern = min(spans), min(busy)
        print(f"{op:5s} span {span:7.1f} µs/call  kernels {kern:6.1f}  gaps {span - kern:6.1f}  "
              f"kernels/call {max(counts):.1f}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]), int(sys.argv[3]))
    else:
        read(sys.argv[2])
