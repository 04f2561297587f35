"""What a small grid can read: the bandwidth of G threadgroups of 4 warps streaming one region, cold.

    python3 ci/gpu/small_grid_bandwidth.py [--mb 8,128] [--grids 16,64,128,256,512]
    # prints one row a probe; $OUT/small_grid_bandwidth_<warps>w.json if OUT is set

SMALL_GRID_WARPS=N sets the warps a threadgroup (4 by default).

At B = 1 a split decode launch has 16 (S = 2048) to 128 (S = 32768) threadgroups of 4 simdgroups,
and its kernel reads 8.4 MB or 134 MB of bf16 K/V in 17.7 or 54.9 µs (docs/h200/journal.md). This times
probes without a kernel around them (CUDA only, not product kernels): each warp walks its own
contiguous run of 8 KB tiles of one region of a 4 GiB buffer (every call another region: out of
L2), every lane 16 pieces of 16 bytes a tile, folded into one word. Forms:
- `loads F`: vector loads into registers (LDG.128), F tiles in flight a warp (64 F registers a lane);
- `ldcg F`: the same loads cached in L2 only (`__ldcg`, ld.global.cg), as cp.async's 16-byte copies are;
- `cp.async N`: copies into threadgroup memory, N tiles in flight a warp (8 N KB of it a warp).
Each kernel's own duration is read from a CUPTI trace (torch.profiler), median of 20 calls.
It replaces ci/gpu/copy_bandwidth.py (2026-12-01 02:30, whole-GPU grids of 2 warps: 4.3-4.4 TB/s
by either form); `SMALL_GRID_WARPS=2 --grids 264,528,792,1056 --mb 4096` would ask its question
again (not run so: one call a probe over the whole buffer).
"""
import argparse
import json
import os
import statistics
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(__file__))
from kernel_gaps import profiled_kernels  # noqa: E402

WARPS = int(os.environ.get("SMALL_GRID_WARPS", "4"))  # a threadgroup's
PIECES = 512  # 16-byte pieces of an 8 KB tile: 16 a lane
TILE_BYTES = 16 * PIECES

HEAD = """
const uint4* d = reinterpret_cast<const uint4*>(data);
const int lane = threadIdx.x % 32;
const long warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
const long warps = gridDim.x * blockDim.x / 32;
const long tiles = data_shape[0] / (4 * PIECES);
const long t0 = warp * tiles / warps, t1 = (warp + 1) * tiles / warps;
unsigned acc = 0;
"""

# F tiles in flight: a ring of F register tiles, the loop unrolled by F so that every index is known.
LOADS = HEAD + """
uint4 ring[F][16];
#pragma unroll
for (int f = 0; f < F; ++f) {
  if (t0 + f < t1) {
    #pragma unroll
    for (int i = 0; i < 16; ++i) ring[f][i] = d[(t0 + f) * PIECES + i * 32 + lane];
  }
}
for (long t = t0; t < t1; t += F) {
  #pragma unroll
  for (int f = 0; f < F; ++f) {
    if (t + f < t1) {
      #pragma unroll
      for (int i = 0; i < 16; ++i) acc ^= ring[f][i].x ^ ring[f][i].y ^ ring[f][i].z ^ ring[f][i].w;
      if (t + f + F < t1) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) ring[f][i] = d[(t + f + F) * PIECES + i * 32 + lane];
      }
    }
  }
}
out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
"""

COPIES = HEAD + """
extern __shared__ __align__(16) uint4 stage_all[];
uint4* stage = stage_all + (threadIdx.x / 32) * N * PIECES;
#define COPY(t) \\
  if ((t) < t1) { \\
    _Pragma("unroll") for (int i = 0; i < 16; ++i) \\
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : \\
          "r"(unsigned(__cvta_generic_to_shared(&stage[((t) % N) * PIECES + i * 32 + lane]))), \\
          "l"(d + (t) * PIECES + i * 32 + lane) : "memory"); \\
  } \\
  asm volatile("cp.async.commit_group;" : : : "memory")
for (int s = 0; s < N; ++s) { COPY(t0 + s); }
for (long t = t0; t < t1; ++t) {
  asm volatile("cp.async.wait_group %0;" : : "n"(N - 1) : "memory");
  __syncwarp();
  #pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint4 x = stage[(t % N) * PIECES + i * 32 + lane];
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  __syncwarp();
  COPY(t + N);
}
out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
"""


def probe_source(form, depth):
    """(body, dynamic shared memory bytes) of a probe: `loads`/`ldcg` with `depth` register tiles in
    flight a warp, or `cp.async` with `depth` tiles of threadgroup memory a warp."""
    if form in ("loads", "ldcg"):
        body = LOADS if form == "loads" else LOADS.replace("= d[", "= __ldcg(d + ").replace(" + lane];", " + lane);")
        body = body.replace("F]", f"{depth}]").replace("< F", f"< {depth}").replace("+= F", f"+= {depth}")
        body = body.replace("+ F <", f"+ {depth} <").replace("+ F)", f"+ {depth})")
        shared = 0
    elif form == "cp.async":
        body = COPIES.replace("N)", f"{depth})").replace("N -", f"{depth} -").replace("< N", f"< {depth}")
        body = body.replace("* N *", f"* {depth} *").replace("% N", f"% {depth}")
        shared = WARPS * depth * TILE_BYTES
    else:
        raise ValueError(f"form must be loads, ldcg or cp.async, got {form!r}")
    return body.replace("PIECES", str(PIECES)), shared


def probe(form, depth):
    body, shared = probe_source(form, depth)
    name = f"small_grid_{form.replace('.', '_')}_{depth}"
    return mx.fast.cuda_kernel(name=name, input_names=["data"], output_names=["out"], source=body,
                               ensure_row_contiguous=False, shared_memory=shared)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", default="8,128", help="region sizes, MB")
    p.add_argument("--grids", default="16,64,128,256,512", help="threadgroups of 4 warps")
    p.add_argument("--forms", default="loads:1,loads:2,loads:3,ldcg:1,ldcg:2,ldcg:3,cp.async:1,cp.async:2,cp.async:4,cp.async:6")
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    data = mx.random.randint(0, 1 << 30, (1 << 30,), dtype=mx.uint32)  # 4 GiB: past the L2
    mx.eval(data)
    rows = []
    for mb in (int(x) for x in args.mb.split(",")):
        words = mb * (1 << 20) // 4
        regions = [data[i * words:(i + 1) * words] for i in range(min(args.calls, data.size // words))]
        for spec in args.forms.split(","):
            form, depth = spec.split(":")
            kernel = probe(form, int(depth))
            for grid in (int(x) for x in args.grids.split(",")):
                threads = 32 * WARPS

                def call(region):
                    return kernel(inputs=[region], grid=(grid * threads, 1, 1), threadgroup=(threads, 1, 1),
                                  output_shapes=[(grid * threads,)], output_dtypes=[mx.uint32])[0]
                try:
                    mx.eval([call(r) for r in regions])  # compile, warm
                except Exception as err:  # e.g. shared memory beyond the limit
                    print(json.dumps(dict(form=form, depth=int(depth), grid=grid, mb=mb, error=str(err)[:120])), flush=True)
                    continue
                kernels = profiled_kernels(lambda: [mx.eval(call(r)) for r in regions])
                durations = [dur for name, _, dur in kernels if "small_grid" in name]
                us = statistics.median(durations)
                row = dict(form=form, depth=int(depth), grid=grid, warps=grid * WARPS, warps_a_threadgroup=WARPS, mb=mb, us=round(us, 2),
                           GBs=round(words * 4 / us / 1e3), kernels=len(durations))
                rows.append(row)
                print(json.dumps(row), flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"small_grid_bandwidth_{WARPS}w.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
