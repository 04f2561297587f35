"""Read bandwidth of the two ways a decode kernel here brings its tiles in, without the kernel:
plain vector loads into registers (LDG.128) and cp.async into threadgroup memory (LDGSTS, then
LDS.128), as decode_mma.metal's STAGES does. CUDA only; a probe, not a product kernel.

Each warp walks its own contiguous run of 8 KB tiles (as a split block walks its keys), every
lane 16 pieces of 16 bytes a tile, and xors what it read into one word (so nothing is dead).
cp.async keeps STAGES tiles in flight a warp (a slot each in shared memory); the loads keep one
tile in flight, the next asked for while this one is folded. Warps: 2 a block, BLOCKS_PER_SM
blocks an SM, 132 SMs.

    python ci/gpu/copy_bandwidth.py          # prints GB/s per form; $OUT/copy_bandwidth.json
"""
import json
import os

import mlx.core as mx

from fusedattend.bench import time_call

SMS = 132
WARPS_PER_BLOCK = 2
TILE_PIECES = 512  # 16-byte pieces of an 8 KB tile: 16 a lane

LOADS = """
const uint4* d = reinterpret_cast<const uint4*>(data);
const int lane = threadIdx.x % 32;
const long warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
const long warps = gridDim.x * blockDim.x / 32;
const long tiles = data_shape[0] / (4 * PIECES);
const long t0 = warp * tiles / warps, t1 = (warp + 1) * tiles / warps;
unsigned acc = 0;
uint4 next[16];
#pragma unroll
for (int i = 0; i < 16; ++i) next[i] = d[t0 * PIECES + i * 32 + lane];
for (long t = t0; t < t1; ++t) {
  uint4 now[16];
  #pragma unroll
  for (int i = 0; i < 16; ++i) now[i] = next[i];
  if (t + 1 < t1) {
    #pragma unroll
    for (int i = 0; i < 16; ++i) next[i] = d[(t + 1) * PIECES + i * 32 + lane];
  }
  #pragma unroll
  for (int i = 0; i < 16; ++i) acc ^= now[i].x ^ now[i].y ^ now[i].z ^ now[i].w;
}
out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
"""

COPIES = """
__shared__ __align__(16) uint4 stage[WARPS][STAGES][PIECES];
const uint4* d = reinterpret_cast<const uint4*>(data);
const int lane = threadIdx.x % 32;
const int w = threadIdx.x / 32;
const long warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
const long warps = gridDim.x * blockDim.x / 32;
const long tiles = data_shape[0] / (4 * PIECES);
const long t0 = warp * tiles / warps, t1 = (warp + 1) * tiles / warps;
unsigned acc = 0;
#define COPY(t) \\
  if ((t) < t1) { \\
    _Pragma("unroll") for (int i = 0; i < 16; ++i) \\
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : \\
          "r"(unsigned(__cvta_generic_to_shared(&stage[w][(t) % STAGES][i * 32 + lane]))), \\
          "l"(d + (t) * PIECES + i * 32 + lane) : "memory"); \\
  } \\
  asm volatile("cp.async.commit_group;" : : : "memory")
for (int s = 0; s < STAGES; ++s) { COPY(t0 + s); }
for (long t = t0; t < t1; ++t) {
  asm volatile("cp.async.wait_group %0;" : : "n"(STAGES - 1) : "memory");
  __syncwarp();
  #pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint4 x = stage[w][t % STAGES][i * 32 + lane];
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  __syncwarp();
  COPY(t + STAGES);
}
out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
"""


def kernel(form, stages):
    body = (COPIES if form == "cp.async" else LOADS).replace("PIECES", str(TILE_PIECES))
    body = body.replace("STAGES", str(stages)).replace("WARPS", str(WARPS_PER_BLOCK))
    name = f"copy_bandwidth_{form.replace('.', '_')}_{stages}"
    return mx.fast.cuda_kernel(name=name, input_names=["data"], output_names=["out"], source=body)


def main():
    data = mx.random.randint(0, 1 << 30, (1 << 30,), dtype=mx.uint32)  # 4 GiB: past the L2
    mx.eval(data)
    rows = []
    for blocks_per_sm in (2, 4, 6, 8):
        blocks = SMS * blocks_per_sm
        threads = 32 * WARPS_PER_BLOCK
        for form, stages in (("loads", 1), ("cp.async", 1), ("cp.async", 2), ("cp.async", 3)):
            k = kernel(form, stages)

            def run():
                return k(inputs=[data], grid=(blocks * threads, 1, 1), threadgroup=(threads, 1, 1),
                         output_shapes=[(blocks * threads,)], output_dtypes=[mx.uint32])[0]
            best = min(time_call(run, repeats=5, inner=5))
            row = dict(form=form, stages=stages, blocks_per_sm=blocks_per_sm,
                       warps_per_sm=blocks_per_sm * WARPS_PER_BLOCK, us=round(best * 1e6, 1),
                       GBs=round(data.nbytes / best / 1e9))
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "copy_bandwidth.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
