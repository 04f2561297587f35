// Split-KV decode attention: one block of keys for ROWS query rows of one kv head.
//
// Schedule (flash-decoding):
//   grid       x: key blocks of `block` keys   y: kv head x row tile   z: layer * B + request
//   threadgroup NSG simdgroups of 32 lanes.
//   A key row of D elements is read as D / E chunks of E elements; KL lanes (the power of two
//   >= D / E) share one key, so a simdgroup holds 32 / KL key slots, and each slot loads U keys
//   before it computes on them (loads in flight hide memory latency). Each lane keeps its
//   E-element slice of the ROWS scaled query rows and of their output accumulators in
//   registers: every query head of the GQA group reads each K/V element once. Dot products are
//   reduced across the KL lanes of a key with simd_shuffle_xor.
//   Every slot runs its own online softmax; slots merge inside the simdgroup by shuffles,
//   simdgroups through threadgroup memory, blocks in merge_partials.metal. `block` depends on
//   S and the chip only, never on B or NL, so each request's arithmetic is the same in any batch.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel (fusedattend/gpu.py builds both from this
// file). Compile-time: T (q/k/v dtype), D, E, ROWS, U, NSG, and for quantized K/V BITS; MT
// (mask dtype) and ST (scales dtype) only name the variant. FA_QUANTIZED (0/1), defined before
// this body, selects the K/V inputs. Run-time (dims[] int32): L, G, block, mask kind (0 none,
// 1 causal, 2 boolean, 3 additive), has key ranges, group size: values that change from call to
// call (block with S) or that would multiply the variants without changing the inner loop.

constexpr int THREADS = NSG * 32;
constexpr int CHUNKS = D / E;
constexpr int KL = CHUNKS <= 1 ? 1 : CHUNKS <= 2 ? 2 : CHUNKS <= 4 ? 4 : CHUNKS <= 8 ? 8 : CHUNKS <= 16 ? 16 : 32;
constexpr int SLOTS = 32 / KL;  // keys a simdgroup reads side by side
constexpr int KEYS_PER_STEP = NSG * SLOTS * U;

const int L = dims[0];
const int G = dims[1];
const int block_keys = dims[2];
const int mask_kind = dims[3];
const bool has_ranges = dims[4] != 0;
const int group_rows = G * L;
const int tiles = (group_rows + ROWS - 1) / ROWS;

const int block = int(threadgroup_position_in_grid.x);
const int tile = int(threadgroup_position_in_grid.y) % tiles;
const int kv_head = int(threadgroup_position_in_grid.y) / tiles;
const int n = int(threadgroup_position_in_grid.z);
const int sg = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const int tid = int(thread_index_in_threadgroup);
const int chunk = lane % KL;       // which E elements of a row this lane holds
const int slot = lane / KL;        // which of the simdgroup's key slots this lane serves
const bool chunk_lane = chunk < CHUNKS;

#if FA_QUANTIZED
const int group_size = dims[5];
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
float q_reg[ROWS][E];
float acc[ROWS][E];
float row_max[ROWS];
float row_sum[ROWS];
int last_key[ROWS];
const float scale = scalars[0];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  const int rr = tile * ROWS + r;
  const int head = kv_head * G + rr / L;
  const bool live = rr < group_rows;
  const int64_t q_off = ((int64_t(n) * H_q + head) * L + rr % L) * D + chunk * E;
  #pragma unroll
  for (int e = 0; e < E; ++e) {
    q_reg[r][e] = (live && chunk_lane) ? float(q[q_off + e]) * scale : 0.0f;
    acc[r][e] = 0.0f;
  }
  row_max[r] = -INFINITY;
  row_sum[r] = 0.0f;
  last_key[r] = !live ? -1 : (mask_kind == 1 ? key_end - L + rr % L : key_end - 1);
}

#if FA_QUANTIZED
const int64_t k_row0 = layer * k_codes_strides[0] + request * k_codes_strides[1] + kv_head * k_codes_strides[2];
const int64_t v_row0 = layer * v_codes_strides[0] + request * v_codes_strides[1] + kv_head * v_codes_strides[2];
const int64_t ks_row0 = layer * k_scales_strides[0] + request * k_scales_strides[1] + kv_head * k_scales_strides[2];
const int64_t vs_row0 = layer * v_scales_strides[0] + request * v_scales_strides[1] + kv_head * v_scales_strides[2];
const int64_t kb_row0 = layer * k_biases_strides[0] + request * k_biases_strides[1] + kv_head * k_biases_strides[2];
const int64_t vb_row0 = layer * v_biases_strides[0] + request * v_biases_strides[1] + kv_head * v_biases_strides[2];
const int group = chunk * E / group_size;
#else
const int64_t k_row0 = layer * k_strides[0] + request * k_strides[1] + kv_head * k_strides[2];
const int64_t v_row0 = layer * v_strides[0] + request * v_strides[1] + kv_head * v_strides[2];
#endif

// Every lane of a simdgroup runs the same number of steps, so the shuffles stay converged.
for (int first = lo + sg * SLOTS * U; first < hi; first += KEYS_PER_STEP) {
  float k_val[U][E];
  float v_val[U][E];
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = first + u * SLOTS + slot;
    if (j < hi && chunk_lane) {
#if FA_QUANTIZED
      fa_load_quantized_chunk<E, BITS>(
          k_codes + k_row0 + j * k_codes_strides[3], chunk,
          float(k_scales[ks_row0 + j * k_scales_strides[3] + group]),
          float(k_biases[kb_row0 + j * k_biases_strides[3] + group]), k_val[u]);
      fa_load_quantized_chunk<E, BITS>(
          v_codes + v_row0 + j * v_codes_strides[3], chunk,
          float(v_scales[vs_row0 + j * v_scales_strides[3] + group]),
          float(v_biases[vb_row0 + j * v_biases_strides[3] + group]), v_val[u]);
#else
      fa_load_chunk<E>(k + k_row0 + j * k_strides[3] + chunk * E, k_val[u]);
      fa_load_chunk<E>(v + v_row0 + j * v_strides[3] + chunk * E, v_val[u]);
#endif
    } else {
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        k_val[u][e] = 0.0f;
        v_val[u][e] = 0.0f;
      }
    }
  }
  #pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = first + u * SLOTS + slot;
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float dot = 0.0f;
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        dot += q_reg[r][e] * k_val[u][e];
      }
      for (int offset = KL / 2; offset > 0; offset /= 2) {
        dot += simd_shuffle_xor(dot, ushort(offset));
      }
      bool visible = j < hi && j <= last_key[r];
      float score = dot;
      if (mask_kind >= 2 && visible) {
        const int rr = tile * ROWS + r;
        const int head = kv_head * G + rr / L;
        const int pos = rr % L;
        const int64_t m_off = layer * mask_strides[0] + request * mask_strides[1] +
            head * mask_strides[2] + pos * mask_strides[3] + j * mask_strides[4];
        const float m_val = float(mask[m_off]);
        if (mask_kind == 2) {
          visible = m_val != 0.0f;
        } else {
          visible = m_val > -INFINITY;
          score += m_val;
        }
      }
      if (visible) {
        if (score > row_max[r]) {  // a new running max: rescale what came before (rarely taken)
          const float rescale = metal::exp(row_max[r] - score);
          row_sum[r] *= rescale;
          #pragma unroll
          for (int e = 0; e < E; ++e) {
            acc[r][e] *= rescale;
          }
          row_max[r] = score;
        }
        const float weight = metal::exp(score - row_max[r]);
        row_sum[r] += weight;
        #pragma unroll
        for (int e = 0; e < E; ++e) {
          acc[r][e] += weight * v_val[u][e];
        }
      }
    }
  }
}

// Merge the key slots of each simdgroup, then the simdgroups, one row at a time.
threadgroup float tg_max[NSG];
threadgroup float tg_sum[NSG];
threadgroup float tg_acc[NSG * D];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  const float simd_row_max = simd_max(row_max[r]);
  const float w = (row_max[r] == -INFINITY) ? 0.0f : metal::exp(row_max[r] - simd_row_max);
  float sum = row_sum[r] * w;
  float part[E];
  #pragma unroll
  for (int e = 0; e < E; ++e) {
    part[e] = acc[r][e] * w;
  }
  for (int offset = KL; offset < 32; offset *= 2) {
    sum += simd_shuffle_xor(sum, ushort(offset));
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      part[e] += simd_shuffle_xor(part[e], ushort(offset));
    }
  }
  if (slot == 0 && chunk_lane) {
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
    for (int d = tid; d < D; d += THREADS) {
      float m_all;
      float l_all;
      const float o = fa_merge_states(tg_max, tg_sum, 1, tg_acc + d, D, NSG, m_all, l_all);
      out_partial[(row * NB + block) * D + d] = o;
      if (d == 0) {
        stats_partial[(row * NB + block) * 2] = m_all;
        stats_partial[(row * NB + block) * 2 + 1] = l_all;
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
