"""Where a small decode call's time goes: µs per call (best of 5 samples of 20 queued calls).

    python ci/gpu/overhead.py [B S]       # default B=1, S=2048 (bf16, H_q=32, H_kv=8, D=128)

Rows: a custom kernel that does nothing (MLX's floor per kernel); two such kernels, independent
and with the second reading the first's output (what a dependency between launches costs); on
the split path (gpu.SINGLE_PASS_MAX_S = 0, whatever S): the decode kernel alone, the merge kernel
alone on partials evaluated beforehand, both again with their sources as text (gpu.kernel_sources,
not by path), decode + merge without argument checks; the public call
as the default schedule makes it; mx.fast.scaled_dot_product_attention for comparison. Then host
time alone (calls made and dropped, never evaluated; best of 7 rounds of 1000 calls, rows
interleaved): the decode and merge kernels' calls as gpu._kernel makes them (on CUDA the files by
path: gpu.CUDA_SOURCES_BY_PATH) and with their text compacted (gpu.compact_source), the decode's
with its files' text as read, the same with its compile-time constants passed as template
arguments on each call instead of written into the body (gpu.constant_lines), an empty kernel's
call with and without those template arguments, a public call's launches (gpu.launcher) made both
ways, the public call, and mx.fast.sdpa. Writes $OUT/overhead_B_S.json.
"""
import json
import os
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import gpu
from fusedattend._problem import plain_problem

sys.path.insert(0, os.path.dirname(__file__))
from schedule_sweep import decode_inputs, queued_us  # noqa: E402


def split(fn):
    """fn with the keys split into blocks and merged by a second launch, at any S."""
    saved = gpu.SINGLE_PASS_MAX_S
    gpu.SINGLE_PASS_MAX_S = 0
    try:
        return fn()
    finally:
        gpu.SINGLE_PASS_MAX_S = saved


def main():
    B, S = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (1, 2048)
    q, k, v = decode_inputs(B, S)
    problem = plain_problem(q, k, v, None, None, None)
    launch = split(lambda: gpu.decode_launch(problem, quantized=False))
    decode = gpu._kernel(launch["name"], launch["input_names"], launch["output_names"],
                         launch["body_file"], launch["defines"], launch["launch_bounds"], launch["constants"])
    empty_kernel = mx.fast.cuda_kernel(name="fa_empty", input_names=["x"], output_names=["y"], source="y[0] = 0.0f;")

    def empty(x):
        return empty_kernel(inputs=[x], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                            output_shapes=[(1,)], output_dtypes=[mx.float32])[0]

    partials = decode(**launch["call"])
    mx.eval(partials)
    merge = gpu._kernel("fa_merge_partials", ("out_partial", "stats_partial"), ("out",), "merge_partials.metal",
                        constants=launch["merge_constants"])

    def as_text(name, input_names, output_names, body_file, defines=(), bounds=None, constants=(), compact=True):
        """The kernel of gpu._kernel's arguments made from its files' text, not their paths."""
        body, header = gpu.kernel_sources(body_file, defines, bounds, constants, compact=compact)
        return mx.fast.cuda_kernel(name=name, input_names=list(input_names), output_names=list(output_names),
                                   source=body, header=header, ensure_row_contiguous=False)

    decode_args = (launch["input_names"], launch["output_names"], launch["body_file"], launch["defines"],
                   launch["launch_bounds"], launch["constants"])
    full = as_text(launch["name"] + "_uncompacted", *decode_args, compact=False)
    compacted = as_text(launch["name"] + "_compacted", *decode_args)
    merge_text = as_text(launch["name"] + "_merge_compacted", ("out_partial", "stats_partial"), ("out",),
                         "merge_partials.metal", constants=launch["merge_constants"])
    rows = {
        "empty custom kernel": lambda: empty(q),
        "two independent empty kernels": lambda: [empty(q), empty(k)],
        "two dependent empty kernels": lambda: empty(empty(q)),
        "decode kernel": lambda: decode(**launch["call"])[0],
        "merge kernel": lambda: merge(inputs=list(partials), **launch["merge_args"])[0],
        "decode kernel, compacted sources": lambda: compacted(**launch["call"])[0],
        "merge kernel, compacted sources": lambda: merge_text(inputs=list(partials), **launch["merge_args"])[0],
        "decode + merge (no checks)": lambda: split(lambda: gpu.decode_attention(problem)),
        "fa.decode_attention": lambda: fa.decode_attention(q, k, v, backend="cuda"),
        "mx.fast.sdpa": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5),
    }
    result = {name: round(queued_us(fn), 1) for name, fn in rows.items()}

    by_path_launch = gpu.launcher(problem, quantized=False)  # the default schedule's launches, made as now
    saved = gpu.CUDA_SOURCES_BY_PATH
    gpu.CUDA_SOURCES_BY_PATH = False
    gpu._kernel.cache_clear()
    try:
        text_launch = gpu.launcher(problem, quantized=False)
    finally:
        gpu.CUDA_SOURCES_BY_PATH = saved
        gpu._kernel.cache_clear()
    mx.eval(by_path_launch(q, k, v), text_launch(q, k, v))
    template = list(launch["constants"])
    plain_body, compact_header = gpu.kernel_sources(launch["body_file"], launch["defines"], launch["launch_bounds"])
    templated = mx.fast.cuda_kernel(name=launch["name"] + "_templated", input_names=list(launch["input_names"]),
                                    output_names=list(launch["output_names"]), source=plain_body,
                                    header=compact_header, ensure_row_contiguous=False)
    mx.eval(templated(template=template, **launch["call"]))
    mx.eval(empty_kernel(inputs=[q], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)],
                         output_dtypes=[mx.float32], template=template))
    host_rows = {
        "host: decode kernel call (gpu._kernel)": lambda: decode(**launch["call"]),
        "host: decode kernel call, compacted sources": lambda: compacted(**launch["call"]),
        "host: decode kernel call, sources as read": lambda: full(**launch["call"]),
        "host: decode kernel call, constants as template arguments": lambda: templated(template=template,
                                                                                        **launch["call"]),
        "host: merge kernel call (gpu._kernel)": lambda: merge(inputs=list(partials), **launch["merge_args"]),
        "host: merge kernel call, compacted sources": lambda: merge_text(inputs=list(partials),
                                                                         **launch["merge_args"]),
        "host: empty kernel call": lambda: empty_kernel(inputs=[q], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                                                         output_shapes=[(1,)], output_dtypes=[mx.float32]),
        "host: empty kernel call, the decode's template arguments": lambda: empty_kernel(
            inputs=[q], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32],
            template=template),
        "host: gpu.launcher's launches (gpu._kernel)": lambda: by_path_launch(q, k, v),
        "host: gpu.launcher's launches, compacted sources": lambda: text_launch(q, k, v),
        "host: fa.decode_attention": lambda: fa.decode_attention(q, k, v, backend="cuda"),
        "host: mx.fast.sdpa": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5),
    }
    best = dict.fromkeys(host_rows, float("inf"))
    for _ in range(7):  # rounds over every row, so that drift of the host's speed touches all
        for name, fn in host_rows.items():
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / 1000 * 1e6)
    result.update({name: round(us, 2) for name, us in best.items()})
    result.update(B=B, S=S)
    print(json.dumps(result), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), f"overhead_{B}_{S}.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
