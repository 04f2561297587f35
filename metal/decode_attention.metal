// Split-KV decode attention: one block of keys for ROWS query rows of one kv head.
//
// Schedule (flash-decoding):
//   grid        x: key blocks of `block` keys   y: kv head x row tile   z: layer * B + request
//   threadgroup NSG simdgroups of 32 lanes. The ROWS query rows (GQA heads x positions) of a
//               tile share it, so every query head of a GQA group reads each K/V element once.
//   KEY_LANES lanes share a key: each holds E elements of it (of K and of V), and E elements of
//   every scaled query row and of every output accumulator, in registers. A simdgroup works on
//   SLOTS = 32 / KEY_LANES keys side by side and U keys per slot. A step's 2 * U loads are
//   issued one step ahead, so that loads are always in flight.
//   Each slot runs its own online softmax per row in base 2 (the query carries log2 e). A key's
//   dot products are reduce-scattered over its lanes: at each of the first shuffle levels a lane
//   keeps half of its rows and sends the other half, so the lanes end holding ROWS_HELD rows'
//   full scores each, not all ROWS. The max, exp2 and denominator of a row run on its lanes only;
//   its weights reach every lane by one shuffle a row, for the weighted V rows accumulated in
//   each lane's E elements. Hidden keys never touch the output. The accumulators are rescaled only in a
//   step where a row's max grew (one branch, rarely taken once the maxima settle); otherwise a
//   step is branch-free, so the U * ROWS chains interleave. No barrier until the end, where
//   slots merge by shuffles and simdgroups through threadgroup memory. Blocks merge in
//   merge_partials.metal. `block` depends on S only (never on B or NL), so each request's
//   arithmetic is the same in any batch.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel (fusedattend/gpu.py builds both from this
// file). Compile-time: T (q/k/v dtype), D, E, ROWS, U, NSG, MASK (0 none, 1 causal, 2 boolean,
// 3 additive), MT (mask dtype), LAYERED (q, k and v have the layer axis; else 4-D, one layer);
// quantized K/V: BITS, ST (scales dtype). FA_QUANTIZED (0/1),
// defined before this body, selects the K/V inputs; FA_SINGLE_PASS (0/1) writes the normalised
// output `out` instead of the block's partial state, for a launch whose one block holds every
// key. Run-time (dims[] int32): L, G, block, has key ranges, group size: values that change with
// the call (block with S) or that would multiply the variants without changing the inner loop;
// scalars[] (float32): the softmax scale, 1.0f.

constexpr int THREADS = NSG * 32;
constexpr int CHUNKS = D / E;
constexpr int KEY_LANES = fa_pow2_at_least<CHUNKS>::value;
constexpr int SLOTS = 32 / KEY_LANES;          // keys a simdgroup reads side by side
constexpr int KEYS_PER_STEP = SLOTS * U;       // keys a simdgroup takes per step
constexpr int ROW_LEVELS = fa_log2<(ROWS < KEY_LANES ? ROWS : KEY_LANES)>::value;  // scatter levels
constexpr int ROWS_HELD = ROWS >> ROW_LEVELS;  // rows whose softmax a lane runs
constexpr int ROW_GROUP_LANES = KEY_LANES >> ROW_LEVELS;  // lanes of a key holding the same rows

// Where the threadgroup works (fa_grid_position); its request and keys after the strides.
const fa_grid_position grid = fa_grid_position_of<ROWS>(threadgroup_position_in_grid, dims);
const int L = grid.L, G = grid.G, group_rows = grid.group_rows;
const int block = grid.block, tile = grid.tile, kv_head = grid.kv_head, n = grid.n;
const int sg = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const int tid = int(thread_index_in_threadgroup);
const int chunk = lane % KEY_LANES;  // which E elements of a row this lane holds
const int slot = lane / KEY_LANES;   // which of the simdgroup's keys this lane serves
const bool chunk_used = chunk < CHUNKS;
const int chunk_read = metal::min(chunk, CHUNKS - 1);  // unused lanes read a neighbour's chunk
const int first_held = chunk / ROW_GROUP_LANES * ROWS_HELD;  // this lane holds rows first_held...

// The inputs' shapes and strides by the axes of the 5-D form (fa_axes5; LAYERED: the caller
// passed the layer axis).
const auto q_shape5 = fa_axes5_of<LAYERED>(q_shape);
const auto q_strides5 = fa_axes5_of<LAYERED>(q_strides);
#if FA_QUANTIZED
const auto k_codes_shape5 = fa_axes5_of<LAYERED>(k_codes_shape);
const auto k_codes_strides5 = fa_axes5_of<LAYERED>(k_codes_strides);
const auto v_codes_strides5 = fa_axes5_of<LAYERED>(v_codes_strides);
const auto k_scales_strides5 = fa_axes5_of<LAYERED>(k_scales_strides);
const auto k_biases_strides5 = fa_axes5_of<LAYERED>(k_biases_strides);
const auto v_scales_strides5 = fa_axes5_of<LAYERED>(v_scales_strides);
const auto v_biases_strides5 = fa_axes5_of<LAYERED>(v_biases_strides);
#else
const auto k_shape5 = fa_axes5_of<LAYERED>(k_shape);
const auto k_strides5 = fa_axes5_of<LAYERED>(k_strides);
const auto v_strides5 = fa_axes5_of<LAYERED>(v_strides);
#endif

#if FA_QUANTIZED
const int group_size = dims[4];
const fa_request_keys keys = fa_request_keys_of(grid, key_ranges, q_shape5, k_codes_shape5);
#else
const fa_request_keys keys = fa_request_keys_of(grid, key_ranges, q_shape5, k_shape5);
#endif
const int H_q = keys.H_q, NB = keys.NB, layer = keys.layer, request = keys.request;
const int key_end = keys.key_end, lo = keys.lo, hi = keys.hi;

// Query rows of this tile: row r is query head kv_head * G + rr / L, position rr % L. Every lane
// keeps all ROWS rows' query and output elements; the softmax state only of its ROWS_HELD rows:
// held row i is row first_held + i. last_key[i] is the last key it may see (causal alignment
// included); -1 for padding rows.
float q_reg[ROWS][E];
float acc[ROWS][E];
float row_max[ROWS_HELD];
float row_sum[ROWS_HELD];
int last_key[ROWS_HELD];
int64_t mask_row[ROWS_HELD];  // MASK >= 2: offset of the held row's mask row
#if FA_QUANTIZED
float q_sum[ROWS];     // sum of this lane's q elements: the bias term of a quantized dot product
float bias_acc[ROWS];  // sum of weight * V bias of this lane's group, added to acc at the end
#endif
// Scores are kept in base 2: the query carries log2(e), so each weight is one exp2.
const float scale = scalars[0] * FA_LOG2_E;
const uint32_t code_one = as_type<uint32_t>(scalars[1]);  // 1.0f (fa_code_unit)
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  const int rr = tile * ROWS + r;
  const int head = kv_head * G + rr / L;
  const bool live = rr < group_rows;
  const auto q_row = q + layer * q_strides5[0] + request * q_strides5[1] + head * q_strides5[2] +
      (rr % L) * q_strides5[3] + chunk_read * E * q_strides5[4];
#if FA_QUANTIZED
  q_sum[r] = 0.0f;
  bias_acc[r] = 0.0f;
#endif
  #pragma unroll
  for (int e = 0; e < E; ++e) {
    q_reg[r][e] = (live && chunk_used) ? float(q_row[e * q_strides5[4]]) * scale : 0.0f;
    acc[r][e] = 0.0f;
#if FA_QUANTIZED
    q_sum[r] += q_reg[r][e];
#endif
  }
}
#pragma unroll
for (int i = 0; i < ROWS_HELD; ++i) {
  const int rr = tile * ROWS + first_held + i;
  const int head = kv_head * G + rr / L;
  row_max[i] = -INFINITY;
  row_sum[i] = 0.0f;
  last_key[i] = fa_last_key<MASK>(rr < group_rows, rr % L, L, key_end);
  mask_row[i] = fa_mask_row<MASK>(mask_strides, layer, request, head, rr % L);
}
// Row r's value of a held-row array, from the lanes of this slot that hold it (every lane holds
// every row when there is nothing to scatter). All lanes of the simdgroup must take part.
#define FA_FROM_HOLDER(held, r) (ROW_LEVELS == 0 ? (held)[(r) % ROWS_HELD] : \
    simd_shuffle((held)[(r) % ROWS_HELD], ushort(slot * KEY_LANES + (r) / ROWS_HELD * ROW_GROUP_LANES)))

// This lane's first K and V element of key 0 of this (layer, request, kv head).
#if FA_QUANTIZED
const int group = chunk_read * E / group_size;
const auto k_row = k_codes + layer * k_codes_strides5[0] + request * k_codes_strides5[1] + kv_head * k_codes_strides5[2];
const auto v_row = v_codes + layer * v_codes_strides5[0] + request * v_codes_strides5[1] + kv_head * v_codes_strides5[2];
const auto ks_row = k_scales + layer * k_scales_strides5[0] + request * k_scales_strides5[1] + kv_head * k_scales_strides5[2] + group * k_scales_strides5[4];
const auto kb_row = k_biases + layer * k_biases_strides5[0] + request * k_biases_strides5[1] + kv_head * k_biases_strides5[2] + group * k_biases_strides5[4];
const auto vs_row = v_scales + layer * v_scales_strides5[0] + request * v_scales_strides5[1] + kv_head * v_scales_strides5[2] + group * v_scales_strides5[4];
const auto vb_row = v_biases + layer * v_biases_strides5[0] + request * v_biases_strides5[1] + kv_head * v_biases_strides5[2] + group * v_biases_strides5[4];
#else
const auto k_row = k + layer * k_strides5[0] + request * k_strides5[1] + kv_head * k_strides5[2] + chunk_read * E * k_strides5[4];
const auto v_row = v + layer * v_strides5[0] + request * v_strides5[1] + kv_head * v_strides5[2] + chunk_read * E * v_strides5[4];
const bool k_packed = fa_packed_rows<E>(k_row, k_strides5[3], k_strides5[4]);
const bool v_packed = fa_packed_rows<E>(v_row, v_strides5[3], v_strides5[4]);
#endif

// Each step's K/V are loaded one step ahead (software pipelining): a simdgroup always has a
// step's loads in flight while it computes. Keys past the block are read as its last key (or
// key 0 when the block is empty: both always exist) and are scored -inf. Every lane of a
// simdgroup runs the same steps, so the shuffles stay converged.
const int last_readable = metal::max(hi, 1) - 1;
constexpr int STEP_STRIDE = NSG * KEYS_PER_STEP;
#if FA_QUANTIZED
fa_code_chunk<E, BITS> k_next[U];
fa_code_chunk<E, BITS> v_next[U];
float k_scale_next[U];
float k_bias_next[U];
float v_scale_next[U];
float v_bias_next[U];
#else
fa_chunk<T, E> k_next[U];
fa_chunk<T, E> v_next[U];
#endif
for (int first = lo + sg * KEYS_PER_STEP - STEP_STRIDE; first < hi; first += STEP_STRIDE) {
#if FA_QUANTIZED
  fa_code_chunk<E, BITS> k_val[U];
  fa_code_chunk<E, BITS> v_val[U];
  float k_scale[U];
  float k_bias[U];
  float v_scale[U];
  float v_bias[U];
#else
  fa_chunk<T, E> k_val[U];
  fa_chunk<T, E> v_val[U];
#endif
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    k_val[u] = k_next[u];
    v_val[u] = v_next[u];
#if FA_QUANTIZED
    k_scale[u] = k_scale_next[u];
    k_bias[u] = k_bias_next[u];
    v_scale[u] = v_scale_next[u];
    v_bias[u] = v_bias_next[u];
#endif
    const int j = metal::min(first + STEP_STRIDE + u * SLOTS + slot, last_readable);
#if FA_QUANTIZED
    fa_load_codes<E, BITS>(k_row, int64_t(j) * k_codes_strides5[3], k_codes_strides5[4], false, chunk_read, code_one, k_next[u]);
    fa_load_codes<E, BITS>(v_row, int64_t(j) * v_codes_strides5[3], v_codes_strides5[4], false, chunk_read, code_one, v_next[u]);
    k_scale_next[u] = float(ks_row[int64_t(j) * k_scales_strides5[3]]);
    k_bias_next[u] = float(kb_row[int64_t(j) * k_biases_strides5[3]]);
    v_scale_next[u] = float(vs_row[int64_t(j) * v_scales_strides5[3]]);
    v_bias_next[u] = float(vb_row[int64_t(j) * v_biases_strides5[3]]);
#else
    fa_load_chunk<E>(k_row + int64_t(j) * k_strides5[3], k_strides5[4], k_packed, k_next[u]);
    fa_load_chunk<E>(v_row + int64_t(j) * v_strides5[3], v_strides5[4], v_packed, v_next[u]);
#endif
  }
  if (first < lo) {
    continue;  // the first iteration only issues the first step's loads
  }
  // Scores of the step's keys. Branch-free from here to the end of the step (but for the rare
  // rescale), so that the compiler can interleave the U independent keys' work.
  float score[U][ROWS];
  #pragma unroll
  for (int u = 0; u < U; ++u) {
#if FA_QUANTIZED
    // Codes read as 1 + c / 2^BITS (fa_code_unit): the scale and bias that undo it.
    const float unit_scale = fa_unit_scale<BITS>(k_scale[u]);
    const float unit_bias = fa_unit_bias<BITS>(k_scale[u], k_bias[u]);
#endif
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float dot = 0.0f;
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        dot += q_reg[r][e] * k_val[u][e];
      }
#if FA_QUANTIZED
      dot = dot * unit_scale + q_sum[r] * unit_bias;
#endif
      score[u][r] = dot;
    }
  }
  // Reduce-scatter over the key's lanes: at a level of offset o, the lane with bit o set keeps
  // the upper half of its rows and adds its partner's; the partner keeps the lower half. Then
  // plain butterflies over the lanes that hold the same rows. score[u][i], i < ROWS_HELD, is then
  // the full score of held row first_held + i (bit-identical in each lane holding it).
  #pragma unroll
  for (int level = 0; level < ROW_LEVELS; ++level) {
    const int offset = KEY_LANES >> (level + 1);
    const int half = ROWS >> (level + 1);
    const bool upper = (lane & offset) != 0;
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      #pragma unroll
      for (int i = 0; i < half; ++i) {
        const float low = score[u][i];
        const float high = score[u][i + half];
        score[u][i] = (upper ? high : low) + simd_shuffle_xor(upper ? low : high, ushort(offset));
      }
    }
  }
  #pragma unroll
  for (int offset = ROW_GROUP_LANES / 2; offset > 0; offset /= 2) {
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      #pragma unroll
      for (int i = 0; i < ROWS_HELD; ++i) {
        score[u][i] += simd_shuffle_xor(score[u][i], ushort(offset));
      }
    }
  }
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = first + u * SLOTS + slot;
    #pragma unroll
    for (int i = 0; i < ROWS_HELD; ++i) {
      score[u][i] = fa_masked_score<MASK>(score[u][i], j, hi, last_key[i], mask, mask_row[i], mask_strides);
    }
  }
  // Online softmax of the held rows. The accumulators are rescaled only in a step where some
  // row's max grew (the factor is exactly 1 otherwise), all rows at once: one branch, rarely
  // taken once the maxima settle, and taken by the whole simdgroup, as its factors travel by
  // shuffles. A row that has seen no key yet takes its weights against 0 (fa_exp2(-inf) = 0).
  float new_max[ROWS_HELD];
  float weight_base[ROWS_HELD];
  bool grew = false;
  #pragma unroll
  for (int i = 0; i < ROWS_HELD; ++i) {
    new_max[i] = row_max[i];
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      new_max[i] = metal::max(new_max[i], score[u][i]);
    }
    grew = grew || new_max[i] > row_max[i];
    weight_base[i] = fa_weight_base(new_max[i]);
  }
  if (simd_any(grew)) {
    float rescale[ROWS_HELD];
    #pragma unroll
    for (int i = 0; i < ROWS_HELD; ++i) {
      rescale[i] = fa_exp2(row_max[i] - weight_base[i]);
      row_sum[i] *= rescale[i];
      row_max[i] = new_max[i];
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float row_rescale = FA_FROM_HOLDER(rescale, r);
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        acc[r][e] = fa_scaled(acc[r][e], row_rescale);
      }
#if FA_QUANTIZED
      bias_acc[r] = fa_scaled(bias_acc[r], row_rescale);
#endif
    }
  }
  float held_weight[U][ROWS_HELD];
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    #pragma unroll
    for (int i = 0; i < ROWS_HELD; ++i) {
      held_weight[u][i] = fa_exp2(score[u][i] - weight_base[i]);
      row_sum[i] += held_weight[u][i];
    }
  }
  // Each V element is widened once, then accumulated into every row that sees its key.
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    float v_row[E];
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      v_row[e] = v_val[u][e];
    }
#if FA_QUANTIZED
    const float unit_scale = fa_unit_scale<BITS>(v_scale[u]);
    const float unit_bias = fa_unit_bias<BITS>(v_scale[u], v_bias[u]);
#endif
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float weight = FA_FROM_HOLDER(held_weight[u], r);
      // Hidden keys never touch the output, NaN rows included. Codes are always finite, so
      // for quantized V zeroing a hidden key's scale and bias is enough, and needs no branch.
      const bool seen = weight != 0.0f;
#if FA_QUANTIZED
      const float scaled = seen ? weight * unit_scale : 0.0f;
      bias_acc[r] += seen ? weight * unit_bias : 0.0f;
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        acc[r][e] += scaled * v_row[e];
      }
#else
      if (seen) {
        #pragma unroll
        for (int e = 0; e < E; ++e) {
          acc[r][e] += weight * v_row[e];
        }
      }
#endif
    }
  }
}

// Merge the slots of each simdgroup (shuffles), then the simdgroups (threadgroup memory), one
// row at a time.
threadgroup float tg_max[NSG];
threadgroup float tg_sum[NSG];
threadgroup float tg_acc[NSG * D];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  const float slot_max = FA_FROM_HOLDER(row_max, r);
  float simd_row_max = slot_max;
  #pragma unroll
  for (int offset = KEY_LANES; offset < 32; offset *= 2) {
    simd_row_max = metal::max(simd_row_max, simd_shuffle_xor(simd_row_max, ushort(offset)));
  }
  const float w = (slot_max == -INFINITY) ? 0.0f : fa_exp2(slot_max - simd_row_max);
  float sum = FA_FROM_HOLDER(row_sum, r) * w;
  float part[E];
  #pragma unroll
  for (int e = 0; e < E; ++e) {
#if FA_QUANTIZED
    part[e] = fa_scaled(acc[r][e] + bias_acc[r], w);
#else
    part[e] = fa_scaled(acc[r][e], w);
#endif
  }
  #pragma unroll
  for (int offset = KEY_LANES; offset < 32; offset *= 2) {
    sum += simd_shuffle_xor(sum, ushort(offset));
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      part[e] += simd_shuffle_xor(part[e], ushort(offset));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous row has been read
  if (slot == 0 && chunk_used) {
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      tg_acc[sg * D + chunk * E + e] = part[e];
    }
  }
  if (lane == 0) {
    tg_max[sg] = simd_row_max;
    tg_sum[sg] = sum;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int rr = tile * ROWS + r;
  if (rr < group_rows) {
    const int head = kv_head * G + rr / L;
    const int64_t row = (int64_t(n) * H_q + head) * L + rr % L;
    const fa_merged<NSG> merged = fa_merge_weights<NSG>(tg_max, tg_sum, 1);  // once a row, not an element
    for (int d = tid; d < D; d += THREADS) {
      const float o = fa_merge_outputs(merged, tg_acc + d, D);
#if FA_SINGLE_PASS
      // One block holds every key: normalise here, as merge_partials.metal would (a single
      // state merges with weight exactly 1), and skip the second launch.
      out[row * D + d] = static_cast<T>(fa_normalise(o, merged.l));
#else
      out_partial[(row * NB + block) * D + d] = o;
      if (d == 0) {
        stats_partial[(row * NB + block) * 2] = merged.m;
        stats_partial[(row * NB + block) * 2 + 1] = merged.l;
      }
#endif
    }
  }
}
