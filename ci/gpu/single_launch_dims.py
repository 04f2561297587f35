"""A decode loop's single launches as shipped against two earlier forms, and MLX's SDPA on the
same steps.

    python3 ci/gpu/single_launch_dims.py [B] [S0] [--each-step]   # default 1 64; rows as JSON lines

Up to gpu.SINGLE_PASS_MAX_S keys a call is one launch whose block is all S keys. The earlier forms:
- "a dims made for each S": before a74e2dd its dims input held S, so a loop on a growing cache
  made a new array from Python each step (gpu._int32s keeps 256; the loop's S cycle through more);
  now it holds a bound of at least S, one array for all. A host-made array each step costs a loop
  on MLX's CUDA backend (docs/h200/host-arrays/). That form also had the next one's launchers.
- "a launcher for each S": until 2026-12-02 the replayer keyed its launchers by S for single
  launches (gpu.key_schedule), so each step set its launch up afresh (_launch_common, _schedule),
  though since a74e2dd that set-up gives the same launch for every S.
The loop: bf16 K/V, H_q = 32, H_kv = 8, D = 128, STEPS chained steps a round on S0 + 0, 1, ...
keys, wrapping before SINGLE_PASS_MAX_S (bench.growing_loop, one loop for each form); --each-step
evaluates every step before the next. Medians over ROUNDS rounds taken in turn: a step's wall µs,
and CUPTI's kernels summed a step. SINGLE_FORMS (comma-separated name prefixes) picks forms.
"""
import functools
import json
import os
import statistics
import sys
import time

import mlx.core as mx

import fusedattend as fa
from fusedattend import bench, gpu

sys.path.insert(0, os.path.dirname(__file__))
from kernel_gaps import profiled_kernels  # noqa: E402

STEPS, ROUNDS = 20, int(os.environ.get("SINGLE_ROUNDS", "15"))
SHIPPED = {"_schedule": gpu._schedule, "key_schedule": gpu.key_schedule}


def keyed_by_S(S, plain_matrix):
    """gpu.key_schedule as before: each S of a single launch its own key, so its own launcher."""
    return S if S <= gpu.SINGLE_PASS_MAX_S else SHIPPED["key_schedule"](S, plain_matrix)


def shipped_schedule(*args):
    """gpu._schedule as shipped, with the shipped key_schedule: since 16dd758 _schedule asks
    key_schedule too, which the earlier forms patch for the replayer's launchers alone."""
    patched, gpu.key_schedule = gpu.key_schedule, SHIPPED["key_schedule"]
    try:
        return SHIPPED["_schedule"](*args)
    finally:
        gpu.key_schedule = patched


@functools.lru_cache(maxsize=None)
def dims_for_each_S(shape, dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype, has_ranges, group_size,
                    layered):
    """gpu._schedule with a single launch's dims as before: its S itself."""
    launch = shipped_schedule(shape, dtype, quantized, mask_kind, mask_dtype, bits, scales_dtype, has_ranges,
                              group_size, layered)
    if not launch.single_pass:
        return launch
    NL, B, H_q, H_kv, L, S, D = shape
    return launch._replace(dims=gpu._int32s(L, H_q // H_kv, S, int(has_ranges), group_size or 0))


def set_form(patches):
    """gpu's attributes as the form has them (the shipped ones elsewhere); replays forgotten on a change."""
    wanted = {**SHIPPED, **patches}
    if any(getattr(gpu, name) is not value for name, value in wanted.items()):
        gpu.set_constants(wanted)


def main():
    each_step = "--each-step" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--each-step"]
    B = int(args[0]) if len(args) > 0 else 1
    S0 = int(args[1]) if len(args) > 1 else 64
    room = gpu.SINGLE_PASS_MAX_S - S0 + 1
    case = bench.make_case(B, gpu.SINGLE_PASS_MAX_S, "bfloat16")
    k, v, q, scale = case["k"], case["v"], case["q"], case["scale"]

    def stepping(attend):
        return lambda x, keys: attend(x, bench.first_keys(k, keys), bench.first_keys(v, keys), scale=scale)

    ours = stepping(functools.partial(fa.decode_attention, backend="cuda"))
    forms = {"shipped": ({}, ours),
             "a launcher for each S (before)": ({"key_schedule": keyed_by_S, "_schedule": shipped_schedule}, ours),
             "a dims made for each S (before a74e2dd)": ({"key_schedule": keyed_by_S, "_schedule": dims_for_each_S}, ours),
             "MLX's SDPA": ({}, stepping(mx.fast.scaled_dot_product_attention))}
    picked = [p for p in os.environ.get("SINGLE_FORMS", "").split(",") if p]
    forms = {name: form for name, form in forms.items() if not picked or name.startswith(tuple(picked))}
    loops = {name: bench.growing_loop(step, q, S0, STEPS, room, each_step) for name, (_, step) in forms.items()}
    samples = {name: [] for name in forms}
    for _ in range(ROUNDS):
        for name, (patches, _) in forms.items():
            set_form(patches)
            run = loops[name]
            mx.eval(run())
            kernels = profiled_kernels(lambda: mx.eval(run()))
            t0 = time.perf_counter()
            mx.eval(run())
            samples[name].append(((time.perf_counter() - t0) / STEPS * 1e6, sum(d for _, _, d in kernels) / STEPS))
    set_form({})
    for name, got in samples.items():
        walls = sorted(w for w, _ in got)
        print(json.dumps(dict(B=B, S0=S0, each_step=each_step, form=name, step_wall_us=round(statistics.median(walls), 1),
                              wall_quartiles=[round(walls[len(walls) // 4], 1), round(walls[3 * len(walls) // 4], 1)],
                              kernels_us_a_step=round(statistics.median(k for _, k in got), 1))), flush=True)


if __name__ == "__main__":
    main()
