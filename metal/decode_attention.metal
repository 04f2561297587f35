// Split-KV decode attention: one block of keys for ROWS query rows of one kv head.
//
// Schedule (flash-decoding):
//   grid       x: key blocks of BLOCK keys   y: kv head x row tile   z: layer * B + request
//   threadgroup NSG simdgroups of 32 lanes.
//   A key row of D elements is read as CHUNKS = D / 8 chunks; KL (the power of two >= CHUNKS)
//   lanes share one key, so a simdgroup takes 32 / KL keys at a time and a threadgroup
//   NSG * 32 / KL. Each lane keeps its 8-element slice of the ROWS scaled query rows and of their
//   output accumulators in registers: every query head of the GQA group reads each K/V element
//   once. Dot products are reduced across the KL lanes of a key with simd_shuffle_xor.
//   Every key slot runs its own online softmax; slots merge inside the simdgroup by shuffles,
//   simdgroups through threadgroup memory, blocks in merge_partials.metal. BLOCK depends on S
//   and the chip only, never on B or NL, so each request's arithmetic is the same in any batch.
//
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel (fusedattend/gpu.py builds both from this
// file). Template constants: T, D, KL, ROWS, L, G, NSG, BLOCK, MASK_KIND (0 none, 1 causal,
// 2 boolean, 3 additive), MT (mask dtype), HAS_RANGES; quantized: BITS, GROUP, ST.
// FA_QUANTIZED (0/1) is defined by the caller before this body: it selects the K/V inputs.

constexpr int CHUNKS = D / FA_CHUNK;
constexpr int KEYS_PER_SIMD = 32 / KL;
constexpr int KEYS_PER_STEP = NSG * KEYS_PER_SIMD;
constexpr int THREADS = NSG * 32;
constexpr int GROUP_ROWS = G * L;
constexpr int TILES = (GROUP_ROWS + ROWS - 1) / ROWS;

const int block = int(threadgroup_position_in_grid.x);
const int tile = int(threadgroup_position_in_grid.y) % TILES;
const int kv_head = int(threadgroup_position_in_grid.y) / TILES;
const int n = int(threadgroup_position_in_grid.z);
const int sg = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const int tid = int(thread_index_in_threadgroup);
const int chunk = lane % KL;       // which 8 elements of a row this lane holds
const int slot = lane / KL;        // which of the simdgroup's keys this lane reads
const bool chunk_lane = chunk < CHUNKS;

#if FA_QUANTIZED
const int B = k_codes_shape[1];
const int S = k_codes_shape[3];
#else
const int B = k_shape[1];
const int S = k_shape[3];
#endif
const int H_q = q_shape[1];
const int NB = (S + BLOCK - 1) / BLOCK;
const int layer = n / B;
const int request = n % B;

int key_begin = 0;
int key_end = S;
if (HAS_RANGES) {
  key_begin = key_ranges[2 * request];
  key_end = key_begin + key_ranges[2 * request + 1];
}
const int lo = metal::max(block * BLOCK, key_begin);
const int hi = metal::min(block * BLOCK + BLOCK, key_end);

// Query rows of this tile: row r is query head kv_head * G + rr / L, position rr % L.
float q_reg[ROWS][FA_CHUNK];
float acc[ROWS][FA_CHUNK];
float row_max[ROWS];
float row_sum[ROWS];
const float scale = params[0];
for (int r = 0; r < ROWS; ++r) {
  const int rr = tile * ROWS + r;
  const int head = kv_head * G + rr / L;
  const bool live = rr < GROUP_ROWS;
  const int64_t q_off = ((int64_t(n) * H_q + head) * L + rr % L) * D + chunk * FA_CHUNK;
  for (int e = 0; e < FA_CHUNK; ++e) {
    q_reg[r][e] = (live && chunk_lane) ? float(q[q_off + e]) * scale : 0.0f;
    acc[r][e] = 0.0f;
  }
  row_max[r] = -INFINITY;
  row_sum[r] = 0.0f;
}

#if FA_QUANTIZED
const int64_t k_row0 = layer * k_codes_strides[0] + request * k_codes_strides[1] + kv_head * k_codes_strides[2];
const int64_t v_row0 = layer * v_codes_strides[0] + request * v_codes_strides[1] + kv_head * v_codes_strides[2];
const int64_t ks_row0 = layer * k_scales_strides[0] + request * k_scales_strides[1] + kv_head * k_scales_strides[2];
const int64_t vs_row0 = layer * v_scales_strides[0] + request * v_scales_strides[1] + kv_head * v_scales_strides[2];
const int group = chunk * FA_CHUNK / GROUP;
#else
const int64_t k_row0 = layer * k_strides[0] + request * k_strides[1] + kv_head * k_strides[2];
const int64_t v_row0 = layer * v_strides[0] + request * v_strides[1] + kv_head * v_strides[2];
#endif

// Every lane of a simdgroup runs the same number of steps, so the shuffles stay converged.
for (int first = lo + sg * KEYS_PER_SIMD; first < hi; first += KEYS_PER_STEP) {
  const int j = first + slot;
  const bool key_live = j < hi;
  float k_val[FA_CHUNK];
  float v_val[FA_CHUNK];
  if (key_live && chunk_lane) {
#if FA_QUANTIZED
    fa_load_quantized_chunk<BITS>(
        k_codes + k_row0 + j * k_codes_strides[3], chunk,
        float(k_scales[ks_row0 + j * k_scales_strides[3] + group]),
        float(k_biases[ks_row0 + j * k_scales_strides[3] + group]), k_val);
    fa_load_quantized_chunk<BITS>(
        v_codes + v_row0 + j * v_codes_strides[3], chunk,
        float(v_scales[vs_row0 + j * v_scales_strides[3] + group]),
        float(v_biases[vs_row0 + j * v_scales_strides[3] + group]), v_val);
#else
    fa_load_chunk(k + k_row0 + j * k_strides[3] + chunk * FA_CHUNK, k_val);
    fa_load_chunk(v + v_row0 + j * v_strides[3] + chunk * FA_CHUNK, v_val);
#endif
  } else {
    for (int e = 0; e < FA_CHUNK; ++e) {
      k_val[e] = 0.0f;
      v_val[e] = 0.0f;
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    float dot = 0.0f;
    for (int e = 0; e < FA_CHUNK; ++e) {
      dot += q_reg[r][e] * k_val[e];
    }
    for (int offset = KL / 2; offset > 0; offset /= 2) {
      dot += simd_shuffle_xor(dot, ushort(offset));
    }
    const int rr = tile * ROWS + r;
    const int head = kv_head * G + rr / L;
    const int pos = rr % L;
    bool visible = key_live && rr < GROUP_ROWS;
    float score = dot;
    if (MASK_KIND == 1) {
      visible = visible && j <= key_end - L + pos;
    } else if (MASK_KIND >= 2 && visible) {
      const int64_t m_off = layer * mask_strides[0] + request * mask_strides[1] +
          head * mask_strides[2] + pos * mask_strides[3] + j * mask_strides[4];
      if (MASK_KIND == 2) {
        visible = bool(mask[m_off]);
      } else {
        const float add = float(mask[m_off]);
        visible = add > -INFINITY;
        score += add;
      }
    }
    if (visible) {
      const float new_max = metal::max(row_max[r], score);
      const float rescale = metal::exp(row_max[r] - new_max);
      const float weight = metal::exp(score - new_max);
      row_sum[r] = row_sum[r] * rescale + weight;
      for (int e = 0; e < FA_CHUNK; ++e) {
        acc[r][e] = acc[r][e] * rescale + weight * v_val[e];
      }
      row_max[r] = new_max;
    }
  }
}

// Merge the key slots of each simdgroup, then the simdgroups, one row at a time.
threadgroup float tg_max[NSG];
threadgroup float tg_sum[NSG];
threadgroup float tg_acc[NSG * D];
for (int r = 0; r < ROWS; ++r) {
  const float simd_row_max = simd_max(row_max[r]);
  const float w = (row_max[r] == -INFINITY) ? 0.0f : metal::exp(row_max[r] - simd_row_max);
  float sum = row_sum[r] * w;
  float part[FA_CHUNK];
  for (int e = 0; e < FA_CHUNK; ++e) {
    part[e] = acc[r][e] * w;
  }
  for (int offset = KL; offset < 32; offset *= 2) {
    sum += simd_shuffle_xor(sum, ushort(offset));
    for (int e = 0; e < FA_CHUNK; ++e) {
      part[e] += simd_shuffle_xor(part[e], ushort(offset));
    }
  }
  if (slot == 0 && chunk_lane) {
    for (int e = 0; e < FA_CHUNK; ++e) {
      tg_acc[sg * D + chunk * FA_CHUNK + e] = part[e];
    }
  }
  if (lane == 0) {
    tg_max[sg] = simd_row_max;
    tg_sum[sg] = sum;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int rr = tile * ROWS + r;
  if (rr < GROUP_ROWS) {
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
