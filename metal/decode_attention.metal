// Split-KV decode attention: one block of keys for ROWS query rows of one kv head.
//
// Schedule (flash-decoding):
//   grid        x: key blocks of `block` keys   y: kv head x row tile   z: layer * B + request
//   threadgroup NSG simdgroups of 32 lanes. The ROWS query rows (GQA heads x positions) of a
//               tile share it, so every query head of a GQA group reads each K/V element once.
//   A block is walked WINDOW keys at a time, in three passes through threadgroup memory:
//   1. scores  KEY_LANES lanes share a key; each holds KE elements of it and of every scaled
//              query row (registers), KU keys loaded before any is used. Dot products are
//              reduced over those lanes by shuffles; the masked score goes to tg_score.
//   2. softmax one simdgroup per row takes the window's max, turns the scores into weights
//              exp(score - running max) in place and rescales the row's running sum.
//   3. values  VALUE_LANES lanes share a key; each accumulates VE output elements of every row,
//              VU keys loaded before any is used. A weight of 0 (a hidden key) adds nothing.
//   Every lane of the threadgroup uses the same running max per row, so the value accumulators
//   of different lanes simply add up at the end. tg_score is double-buffered: two barriers a
//   window. Blocks merge in merge_partials.metal. `block` depends on S only (never on B or NL),
//   so each request's arithmetic is the same in any batch.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel (fusedattend/gpu.py builds both from this
// file). Compile-time: T (q/k/v dtype), D, ROWS, NSG, WINDOW, KE, KU, VE, VU, MASK (0 none,
// 1 causal, 2 boolean, 3 additive), MT (mask dtype); quantized K/V: BITS, ST (scales dtype).
// FA_QUANTIZED (0/1), defined before this body, selects the K/V inputs. Run-time (dims[] int32):
// L, G, block, has key ranges, group size: values that change with the call (block with S) or
// that would multiply the variants without changing the inner loops.

constexpr int THREADS = NSG * 32;
constexpr int KEY_CHUNKS = D / KE;
constexpr int KEY_LANES = fa_pow2_at_least<KEY_CHUNKS>::value;
constexpr int KEY_SLOTS = THREADS / KEY_LANES;  // keys scored side by side
constexpr int VALUE_CHUNKS = D / VE;
constexpr int VALUE_LANES = fa_pow2_at_least<VALUE_CHUNKS>::value;
constexpr int VALUE_SLOTS = THREADS / VALUE_LANES;  // keys accumulated side by side

const int L = dims[0];
const int G = dims[1];
const int block_keys = dims[2];
const bool has_ranges = dims[3] != 0;
const int group_rows = G * L;
const int tiles = (group_rows + ROWS - 1) / ROWS;

const int block = int(threadgroup_position_in_grid.x);
const int tile = int(threadgroup_position_in_grid.y) % tiles;
const int kv_head = int(threadgroup_position_in_grid.y) / tiles;
const int n = int(threadgroup_position_in_grid.z);
const int sg = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const int tid = int(thread_index_in_threadgroup);
const int key_chunk = lane % KEY_LANES;  // which KE elements of a key this lane holds
const int key_slot = tid / KEY_LANES;
const bool key_lane_used = key_chunk < KEY_CHUNKS;
const int key_chunk_read = metal::min(key_chunk, KEY_CHUNKS - 1);  // unused lanes read a neighbour's
const int value_chunk = lane % VALUE_LANES;  // which VE elements of a value row
const int value_slot = tid / VALUE_LANES;
const bool value_lane_used = value_chunk < VALUE_CHUNKS;
const int value_chunk_read = metal::min(value_chunk, VALUE_CHUNKS - 1);

#if FA_QUANTIZED
const int group_size = dims[4];
const int B = k_codes_shape[1];
const int S = k_codes_shape[3];
#else
const int B = k_shape[1];
const int S = k_shape[3];
#endif
const int H_q = q_shape[1];
const int NB = (S + block_keys - 1) / block_keys;
const int layer = n / B;
const int request = n % B;

int key_begin = 0;
int key_end = S;
if (has_ranges) {
  key_begin = key_ranges[2 * request];
  key_end = key_begin + key_ranges[2 * request + 1];
}
const int lo = metal::max(block * block_keys, key_begin);
const int hi = metal::min(block * block_keys + block_keys, key_end);

// Query rows of this tile: row r is query head kv_head * G + rr / L, position rr % L.
// last_key[r] is the last key row r may see (causal alignment included); -1 for padding rows.
float q_reg[ROWS][KE];
float acc[ROWS][VE];
int last_key[ROWS];
#if FA_QUANTIZED
float q_sum[ROWS];     // sum of this lane's q elements: the bias term of a quantized dot product
float bias_acc[ROWS];  // sum of weight * bias of this lane's value group: added to acc at the end
#endif
int64_t mask_row[ROWS];  // MASK >= 2: offset of row r's mask row
const float scale = scalars[0];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  const int rr = tile * ROWS + r;
  const int head = kv_head * G + rr / L;
  const bool live = rr < group_rows;
  const int64_t q_off = ((int64_t(n) * H_q + head) * L + rr % L) * D + key_chunk * KE;
#if FA_QUANTIZED
  q_sum[r] = 0.0f;
  bias_acc[r] = 0.0f;
#endif
  #pragma unroll
  for (int e = 0; e < KE; ++e) {
    q_reg[r][e] = (live && key_lane_used) ? float(q[q_off + e]) * scale : 0.0f;
#if FA_QUANTIZED
    q_sum[r] += q_reg[r][e];
#endif
  }
  #pragma unroll
  for (int e = 0; e < VE; ++e) {
    acc[r][e] = 0.0f;
  }
  last_key[r] = !live ? -1 : (MASK == 1 ? key_end - L + rr % L : key_end - 1);
  mask_row[r] = MASK >= 2 ? layer * mask_strides[0] + request * mask_strides[1] +
      head * mask_strides[2] + (rr % L) * mask_strides[3] : 0;
}

// Each lane's first K and V element of key 0 of this (layer, request, kv head).
#if FA_QUANTIZED
const int k_group = key_chunk_read * KE / group_size;
const int v_group = value_chunk_read * VE / group_size;
const auto k_row = k_codes + layer * k_codes_strides[0] + request * k_codes_strides[1] + kv_head * k_codes_strides[2];
const auto v_row = v_codes + layer * v_codes_strides[0] + request * v_codes_strides[1] + kv_head * v_codes_strides[2];
const auto ks_row = k_scales + layer * k_scales_strides[0] + request * k_scales_strides[1] + kv_head * k_scales_strides[2] + k_group * k_scales_strides[4];
const auto kb_row = k_biases + layer * k_biases_strides[0] + request * k_biases_strides[1] + kv_head * k_biases_strides[2] + k_group * k_biases_strides[4];
const auto vs_row = v_scales + layer * v_scales_strides[0] + request * v_scales_strides[1] + kv_head * v_scales_strides[2] + v_group * v_scales_strides[4];
const auto vb_row = v_biases + layer * v_biases_strides[0] + request * v_biases_strides[1] + kv_head * v_biases_strides[2] + v_group * v_biases_strides[4];
#else
const auto k_row = k + layer * k_strides[0] + request * k_strides[1] + kv_head * k_strides[2] + key_chunk_read * KE * k_strides[4];
const auto v_row = v + layer * v_strides[0] + request * v_strides[1] + kv_head * v_strides[2] + value_chunk_read * VE * v_strides[4];
const bool k_packed = fa_packed_rows<KE>(k_row, k_strides[3], k_strides[4]);
const bool v_packed = fa_packed_rows<VE>(v_row, v_strides[3], v_strides[4]);
#endif

threadgroup float tg_score[2][ROWS * WINDOW];
threadgroup float tg_max[ROWS];      // running max of each row over the block so far
threadgroup float tg_sum[ROWS];      // running denominator
threadgroup float tg_rescale[ROWS];  // what the last window did to the running max
threadgroup float tg_acc[NSG * D];
if (tid < ROWS) {
  tg_max[tid] = -INFINITY;
  tg_sum[tid] = 0.0f;
}

int buf = 0;
for (int w0 = lo; w0 < hi; w0 += WINDOW, buf ^= 1) {
  // 1. scores
  #pragma unroll 1  // KU keys in flight is the point: more would cost occupancy (registers)
  for (int jj0 = 0; jj0 < WINDOW; jj0 += KEY_SLOTS * KU) {
    float k_val[KU][KE];
#if FA_QUANTIZED
    float k_scale[KU];
    float k_bias[KU];
#endif
    #pragma unroll
    for (int u = 0; u < KU; ++u) {
      // Keys past the block are read as its last key (always there) and scored -inf below.
      const int j = metal::min(w0 + jj0 + u * KEY_SLOTS + key_slot, hi - 1);
#if FA_QUANTIZED
      fa_load_codes<KE, BITS>(k_row + int64_t(j) * k_codes_strides[3], k_codes_strides[4], key_chunk_read, k_val[u]);
      k_scale[u] = float(ks_row[int64_t(j) * k_scales_strides[3]]);
      k_bias[u] = float(kb_row[int64_t(j) * k_biases_strides[3]]);
#else
      fa_load_chunk<KE>(k_row + int64_t(j) * k_strides[3], k_strides[4], k_packed, k_val[u]);
#endif
    }
    #pragma unroll
    for (int u = 0; u < KU; ++u) {
      const int jj = jj0 + u * KEY_SLOTS + key_slot;
      const int j = w0 + jj;
      #pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float dot = 0.0f;
        #pragma unroll
        for (int e = 0; e < KE; ++e) {
          dot += q_reg[r][e] * k_val[u][e];
        }
#if FA_QUANTIZED
        dot = dot * k_scale[u] + q_sum[r] * k_bias[u];
#endif
        #pragma unroll
        for (int offset = KEY_LANES / 2; offset > 0; offset /= 2) {
          dot += simd_shuffle_xor(dot, ushort(offset));
        }
        if (r % KEY_LANES == key_chunk && jj < WINDOW) {
          bool visible = j < hi && j <= last_key[r];
          float score = dot;
          if (MASK >= 2 && visible) {
            const float m_val = float(mask[mask_row[r] + int64_t(j) * mask_strides[4]]);
            if (MASK == 2) {
              visible = m_val != 0.0f;
            } else {
              visible = m_val > -INFINITY;
              score += m_val;
            }
          }
          tg_score[buf][r * WINDOW + jj] = visible ? score : -INFINITY;
        }
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 2. softmax: the window's weights under the new running max of each row
  for (int r = sg; r < ROWS; r += NSG) {
    float window_max = -INFINITY;
    for (int jj = lane; jj < WINDOW; jj += 32) {
      window_max = metal::max(window_max, tg_score[buf][r * WINDOW + jj]);
    }
    window_max = simd_max(window_max);
    const float old_max = tg_max[r];
    const float new_max = metal::max(old_max, window_max);
    float window_sum = 0.0f;
    for (int jj = lane; jj < WINDOW; jj += 32) {
      const float score = tg_score[buf][r * WINDOW + jj];
      const float weight = (score == -INFINITY) ? 0.0f : metal::exp(score - new_max);
      tg_score[buf][r * WINDOW + jj] = weight;
      window_sum += weight;
    }
    window_sum = simd_sum(window_sum);  // also: every lane has read old_max before lane 0 writes
    if (lane == 0) {
      const float rescale = (old_max == -INFINITY) ? 1.0f : metal::exp(old_max - new_max);
      tg_rescale[r] = rescale;
      tg_max[r] = new_max;
      tg_sum[r] = tg_sum[r] * rescale + window_sum;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 3. values
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float rescale = tg_rescale[r];
    if (rescale != 1.0f) {
      #pragma unroll
      for (int e = 0; e < VE; ++e) {
        acc[r][e] *= rescale;
      }
#if FA_QUANTIZED
      bias_acc[r] *= rescale;
#endif
    }
  }
  #pragma unroll 1
  for (int jj0 = 0; jj0 < WINDOW; jj0 += VALUE_SLOTS * VU) {
    float v_val[VU][VE];
#if FA_QUANTIZED
    float v_scale[VU];
    float v_bias[VU];
#endif
    #pragma unroll
    for (int u = 0; u < VU; ++u) {
      // Keys past the block are read as its last key; their weight is 0, so they add nothing.
      const int j = metal::min(w0 + jj0 + u * VALUE_SLOTS + value_slot, hi - 1);
#if FA_QUANTIZED
      fa_load_codes<VE, BITS>(v_row + int64_t(j) * v_codes_strides[3], v_codes_strides[4], value_chunk_read, v_val[u]);
      v_scale[u] = float(vs_row[int64_t(j) * v_scales_strides[3]]);
      v_bias[u] = float(vb_row[int64_t(j) * v_biases_strides[3]]);
#else
      fa_load_chunk<VE>(v_row + int64_t(j) * v_strides[3], v_strides[4], v_packed, v_val[u]);
#endif
    }
    #pragma unroll
    for (int u = 0; u < VU; ++u) {
      const int jj = jj0 + u * VALUE_SLOTS + value_slot;
      if (jj < WINDOW) {
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          const float weight = tg_score[buf][r * WINDOW + jj];
          if (weight != 0.0f) {  // hidden keys (weight 0) never touch the output, NaN rows included
#if FA_QUANTIZED
            const float scaled = weight * v_scale[u];
            bias_acc[r] += weight * v_bias[u];
#else
            const float scaled = weight;
#endif
            #pragma unroll
            for (int e = 0; e < VE; ++e) {
              acc[r][e] += scaled * v_val[u][e];
            }
          }
        }
      }
    }
  }
}

// Sum the value accumulators of each simdgroup's key slots (shuffles), then of the simdgroups
// (threadgroup memory), one row at a time.
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  float part[VE];
  #pragma unroll
  for (int e = 0; e < VE; ++e) {
#if FA_QUANTIZED
    part[e] = acc[r][e] + bias_acc[r];
#else
    part[e] = acc[r][e];
#endif
    for (int offset = VALUE_LANES; offset < 32; offset *= 2) {
      part[e] += simd_shuffle_xor(part[e], ushort(offset));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous row's tg_acc has been read
  if (lane < VALUE_LANES && value_lane_used) {
    #pragma unroll
    for (int e = 0; e < VE; ++e) {
      tg_acc[sg * D + value_chunk * VE + e] = part[e];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int rr = tile * ROWS + r;
  if (rr < group_rows) {
    const int head = kv_head * G + rr / L;
    const int64_t row = (int64_t(n) * H_q + head) * L + rr % L;
    for (int d = tid; d < D; d += THREADS) {
      float o = 0.0f;
      for (int i = 0; i < NSG; ++i) {
        o += tg_acc[i * D + d];
      }
      out_partial[(row * NB + block) * D + d] = o;
      if (d == 0) {
        stats_partial[(row * NB + block) * 2] = tg_max[r];
        stats_partial[(row * NB + block) * 2 + 1] = tg_sum[r];
      }
    }
  }
}
