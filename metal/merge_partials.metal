// Merge the per-block online-softmax states of decode_attention.metal and normalise.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel. One threadgroup per query row, one
// thread per output element: grid (rows * D, 1, 1), threadgroup (D, 1, 1), rows = N * H_q * L.
// Blocks are merged in block order, so the result is the same whatever the batch around it.
// A row whose blocks all saw no key (fully masked) gets zeros.
// Template constants: T (output dtype), D.

const int d = int(thread_index_in_threadgroup);
const int64_t row = int64_t(threadgroup_position_in_grid.x);
const int NB = stats_partial_shape[3];
float m_all;
float l_all;
const float o = fa_merge_states(
    stats_partial + row * NB * 2, stats_partial + row * NB * 2 + 1, 2,
    out_partial + row * NB * D + d, D, NB, m_all, l_all);
out[row * D + d] = static_cast<T>(fa_normalise(o, l_all));
