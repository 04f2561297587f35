// Merge the per-block online-softmax states of decode_attention.metal and normalise.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel. One threadgroup per query row, one
// thread per output element: grid (rows * THREADS, 1, 1), threadgroup (THREADS, 1, 1), THREADS =
// D rounded up to whole simdgroups (lanes past D read dim D - 1 and write nothing), rows =
// N * H_q * L. The merge is latency-bound (a few KB a row, read right after they were written):
// lane i of every simdgroup reads block i's max and denominator, so each simdgroup has the row's
// states in one load a lane, with no barrier, and a thread's 32 loads of its output element are
// all issued before the first is used. The weights reach every thread by shuffles, and the sums
// run in block order, so the result is the same whatever the batch around it. A row whose blocks
// all saw no key (fully masked) gets zeros.
// Template constants: T (output dtype), D. Define FA_MERGE_WINDOW 1: the blocks of two launches,
// out_partial / stats_partial's (the quantized keys) then out_window / stats_window's (the
// window: fusedattend/window_gpu.py), as one row of blocks in that order, with no copy joining them.

constexpr int BLOCKS_AT_ONCE = 32;  // a simdgroup's lanes: one block's state each
const int d = metal::min(int(thread_index_in_threadgroup), D - 1);
const int lane = int(thread_index_in_simdgroup);
const int64_t row = int64_t(threadgroup_position_in_grid.x);
#if FA_MERGE_WINDOW
const int NB_Q = stats_partial_shape[3];
const int NB = NB_Q + stats_window_shape[3];
const auto stats_q = stats_partial + row * NB_Q * 2;
const auto stats_w = stats_window + row * (NB - NB_Q) * 2;
const auto o_q = out_partial + row * NB_Q * D + d;
const auto o_w = out_window + row * (NB - NB_Q) * D + d;
#define FA_STATE(i, k) ((i) < NB_Q ? stats_q[(i) * 2 + (k)] : stats_w[((i) - NB_Q) * 2 + (k)])
#define FA_OUT(i) ((i) < NB_Q ? o_q[int64_t(i) * D] : o_w[int64_t((i) - NB_Q) * D])
#else
const int NB = stats_partial_shape[3];
const auto stats = stats_partial + row * NB * 2;
const auto o_row = out_partial + row * NB * D + d;
#define FA_STATE(i, k) stats[(i) * 2 + (k)]
#define FA_OUT(i) o_row[int64_t(i) * D]
#endif

float m_all = -INFINITY;
for (int first = 0; first < NB; first += BLOCKS_AT_ONCE) {
  float m = first + lane < NB ? FA_STATE(first + lane, 0) : -INFINITY;
  #pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    m = metal::max(m, simd_shuffle_xor(m, ushort(offset)));
  }
  m_all = metal::max(m_all, m);
}
float o_all = 0.0f;
float l_all = 0.0f;
for (int first = 0; first < NB; first += BLOCKS_AT_ONCE) {
  const int count = metal::min(BLOCKS_AT_ONCE, NB - first);
  const bool mine = lane < count;
  const float m = mine ? FA_STATE(first + lane, 0) : -INFINITY;
  const float l = mine ? FA_STATE(first + lane, 1) : 0.0f;
  const float w = m == -INFINITY ? 0.0f : fa_exp2(m - m_all);  // 0 for a state that saw no key
  float o[BLOCKS_AT_ONCE];
  #pragma unroll
  for (int i = 0; i < BLOCKS_AT_ONCE; ++i) {
    o[i] = i < count ? FA_OUT(first + i) : 0.0f;
  }
  #pragma unroll
  for (int i = 0; i < BLOCKS_AT_ONCE; ++i) {
    const float w_i = simd_shuffle(w, ushort(i));
    o_all += fa_scaled(o[i], w_i);  // a block weighed 0 in the row is skipped, NaN or not
    l_all += w_i * simd_shuffle(l, ushort(i));
  }
}
if (int(thread_index_in_threadgroup) < D) {
  out[row * D + d] = static_cast<T>(fa_normalise(o_all, l_all));
}
#undef FA_STATE
#undef FA_OUT
