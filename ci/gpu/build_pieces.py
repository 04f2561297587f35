"""Where a queued call's graph building goes: our Python, or MLX's custom-kernel calls.

    python3 ci/gpu/build_pieces.py [B S ...]     # default: 1 2048 32 32768
    python3 ci/gpu/build_pieces.py --stub 1 512  # anywhere: kernels stubbed (ci/host_cost.py)

The tables' samples build 20 calls, then mx.eval runs them, and at small B the build is most of
a call (docs/gpu.md, "What bounds each missed target"). This builds the same calls in pieces,
each sample after an evaluation as the benchmark does, the variants taking turns each round:
- `public call`: fa.decode_attention / fa.quantized_decode_attention, as benchmarked;
- `replay`: the replayed launches alone (the signature and the lookup skipped);
- `kernel calls`: MLX's two mx.fast kernel calls (decode, then merge) on inputs made beforehand;
- `decode call`: the first of them alone;
- `empty kernel`: a kernel of one input and one output that does nothing (MLX's floor);
- the peer (mx.fast.scaled_dot_product_attention, or mlx_lm's quantized path).
Cases as in the cold table (fusedattend.bench.cold_cases, 200 MB of K/V copies in turn). Prints
one JSON line a case and variant: build µs a call (median and least), evaluation µs a call.
"""
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fusedattend as fa  # noqa: E402
from fusedattend import _problem, backends, gpu  # noqa: E402
from fusedattend.bench import cold_cases, in_turn  # noqa: E402

import build_probe_args  # noqa: E402

INNER = 20
PEERS = {"bfloat16": "mx.fast.sdpa", "q4": "mlx_lm.qsdpa"}


def sample(call):
    """(build s, eval s) of one sample of INNER calls."""
    t0 = time.perf_counter()
    outs = [call() for _ in range(INNER)]
    t1 = time.perf_counter()
    mx.eval(outs)
    return t1 - t0, time.perf_counter() - t1


def pieces(case, backend):
    """name -> zero-argument call, for one cold copy."""
    q, scale = case["q"], case["scale"]
    if "kq" in case:
        kw = dict(scale=scale, bits=case["bits"], group_size=case["group_size"], backend=backend)
        public = lambda: fa.quantized_decode_attention(q, case["kq"], case["vq"], **kw)  # noqa: E731
        problem = _problem.quantized_problem(q, case["kq"], case["vq"], scale, None, None, case["bits"],
                                             case["group_size"])
        signature = _problem.quantized_signature(q, case["kq"], case["vq"], scale, None, None, case["bits"],
                                                 case["group_size"])
    else:
        public = lambda: fa.decode_attention(q, case["k"], case["v"], scale=scale, backend=backend)  # noqa: E731
        problem = _problem.plain_problem(q, case["k"], case["v"], scale, None, None)
        signature = _problem.call_signature((q, case["k"], case["v"]), scale, None, None)
    quantized = "kq" in case
    public()  # checked once: later calls replay
    replay = backends.replay(signature, backend)
    arrays = problem.arrays
    launch, inputs_of = gpu._launch_common(problem, quantized, problem.shape)
    decode = gpu._kernel(launch.name, launch.input_names, launch.output_names, launch.body_file, launch.defines,
                         launch.launch_bounds, launch.constants)
    inputs = inputs_of(arrays)
    calls = {"public call": public, "replay": lambda: replay(*arrays)}
    if launch.single_pass:
        calls["kernel calls"] = lambda: decode(inputs=inputs, **launch.kernel_args)[0]
    else:
        merge = gpu._kernel("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal",
                            constants=launch.merge_constants)
        calls["kernel calls"] = lambda: merge(inputs=decode(inputs=inputs, **launch.kernel_args),
                                              **launch.merge_args)[0]
        calls["decode call"] = lambda: decode(inputs=inputs, **launch.kernel_args)[0]
    return calls


def empty_kernel():
    make = mx.fast.metal_kernel if gpu.on_metal() else mx.fast.cuda_kernel
    kernel = make(name="fa_probe_empty", input_names=["x"], output_names=["y"], source="")
    x = mx.zeros((1,), dtype=mx.float32)
    return lambda: kernel(inputs=[x], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(32, 1, 1),
                          threadgroup=(32, 1, 1))[0]


def main():
    args = build_probe_args.parse(__doc__, [1, 2048, 32, 32768])
    for B, S in args.pairs:
        for fmt, peer in PEERS.items():
            cases = cold_cases(B, S, fmt, args.cold_mb << 20)
            per_copy = [pieces(case, "cuda") for case in cases]
            turns = {name: itertools.cycle([c[name] for c in per_copy]) for name in per_copy[0]}
            calls = {name: (lambda it=it: next(it)()) for name, it in turns.items()}
            if not args.stub:
                calls["empty kernel"] = empty_kernel()
            peer_call = in_turn(cases, [], chain=False).get(peer)
            if peer_call is not None:
                calls[peer] = peer_call
            for call in calls.values():
                for _ in range(3):
                    sample(call)
            runs = {name: [] for name in calls}
            for _ in range(args.rounds):
                for name, call in calls.items():
                    runs[name].append(sample(call))
            for name, rows in runs.items():
                build = [r[0] / INNER * 1e6 for r in rows]
                print(json.dumps({"B": B, "S": S, "fmt": fmt, "variant": name,
                                  "build_us": round(statistics.median(build), 2),
                                  "build_min_us": round(min(build), 2),
                                  "eval_us": round(statistics.median(r[1] / INNER * 1e6 for r in rows), 2)}),
                      flush=True)


if __name__ == "__main__":
    main()
