// Decode attention on simdgroup matrices (Apple's simdgroup_matrix, NVIDIA's tensor cores
// through cuda_compat.h), over quantized K/V (FA_QUANTIZED 1) or plain f16 / bf16 K/V (0): one
// block of keys for 8 query rows of one kv head.
//
// Schedule: decode_attention.metal's grid, threadgroups, key blocks, online softmax in base 2,
// merge and outputs. A simdgroup takes a tile of 16 keys at a time (tiles interleave over the NSG
// simdgroups) and loads the next tile's codes, scales and biases while it works on this one.
// Products are transposed so that every matrix is full: keys and dims run along the rows (16 to a
// tensor-core tile on NVIDIA: fa_mma2), the 8 query rows along the columns.
//   Scores S^T = K Q^T, one accumulator per quantization group: the codes read as 1 + c / 2^BITS
//   against Q^T, exact either way: in T (f16 / bf16, k = 16, two codes a shift and a logic op:
//   fa_code_pair), where T's mantissa holds a code and a lane's codes of a group are whole words
//   (SCORE_MANTISSA != 0); else in 32-bit operands (tf32 on NVIDIA, k = 8, fa_code_unit). Each
//   group's scale and bias then apply in float: scale * (c . q) + bias * sum(q over the group).
//   A lane holds two query rows' elements of every accumulator: their max and sum run over the
//   lanes that share them (FA_FRAG_COL_XOR0..2), and the output's rescale is a factor a row.
//   Output O^T += V_G^T P_G^T for each V group G: the codes against the weights scaled by the
//   group's scale of their key, a float operand; the bias term sum(p * bias) apart. The codes
//   in bf16 (OUT_MANTISSA != 0: k = 16, a word pairs two keys of one dim, fa_code_pair_keys)
//   against the weights of the whole 16-key tile (fa_accs_as_b16, fa_mma2_16_any_b: three bf16
//   parts, float's range and its 24 bits: a weight times its key's scale can be any float, and
//   two parts' 16 bits broke the parity bound where a row's output cancels to near 0); else in
//   32-bit operands (tf32, k = 8, fa_acc_as_b, fa_mma2_any_b).
//   Dims are permuted within a group (fa_qmma_score_dim(16) / fa_qmma_out_dim), so that a lane's
//   codes of a group are one run of words; the output goes back in D's order.
// Plain K/V are the same schedule with one group the width of D and no codes: a lane's K words
// are T pairs as loaded (a run of D / 4 dims of its row's key, 16-bit scores always); its V
// elements, a run of D / 8 dims of each of 2 pairs of consecutive keys, become words of V^T in T
// that pair two keys of one dim (fa_chunks_word: one byte permute on NVIDIA), against the weights
// of the whole 16-key tile as a float operand (fa_mma2_16_any_b); no scales or bias terms. A run
// lies in the row in 16-byte pieces, a piece of each run in turn (fa_run_dim), so that the lanes
// of a key read one stretch of it with each vector load. A weight of 0 times a NaN in V would
// still be NaN in a product, so the V elements of keys that no row of the tile weighs are zeroed
// (a tile of the block's end, masks, key ranges), and a tile where NaN or Inf sits in V of a key
// only some rows weigh takes its product a row at a time.
// Body of mx.fast.metal_kernel / mx.fast.cuda_kernel. Compile-time: T (f16 or bf16 queries), D
// (<= 128; quantized: a multiple of GS; plain: of 32), NSG, MASK, MT, OFFSETS32 (32-bit offsets
// where the strides allow), LAYERED (as decode_attention.metal's); quantized K/V: GS (group
// size), BITS, ST (scales dtype), SCORE_MANTISSA (T's mantissa bits for 16-bit scores, 0 for
// 32-bit), OUT_MANTISSA (OT's for 16-bit output operands, 0 for 32-bit), OT (their type: bf16),
// STAGES (tiles staged through threadgroup memory, see below; 0: not); plain K/V:
// WEIGHT_SCALE_LOG2; both: PREFETCH_TILES (how far ahead tiles are asked into L2; 0: not).
// FA_QUANTIZED and FA_SINGLE_PASS as in decode_attention.metal. Run-time dims[]: L, G, block, has
// key ranges; scalars[]: the softmax scale, 1.0f.

#if !FA_QUANTIZED
constexpr int GS = D;              // one group: a lane's K run is D / 4 dims, its V run D / 8
constexpr int BITS = 16;           // a K "code" is a T element: fa_qmma_score_dim16<D, 16>
constexpr int SCORE_MANTISSA = 1;  // scores on 16-bit operands always (K and Q are T)
// The output's weights, at most 1, enter the products scaled by 2^WEIGHT_SCALE_LOG2 (14 for
// f16, whose parts would lose weights under 2^-24 to its range; 0 for bf16), undone at the end.
constexpr float WEIGHT_SCALE = float(1 << WEIGHT_SCALE_LOG2);
#endif

constexpr int THREADS = NSG * 32;
constexpr int ROWS = 8;                         // query rows of a tile: the matrices' 8 columns
constexpr int HALF_KEYS = 8;                    // keys of a matrix; a tile has two
constexpr int TILE_KEYS = 2 * HALF_KEYS;        // keys a simdgroup takes at a time
constexpr int TILES = D / 8;                    // 8-dim tiles of Q, K and the output
constexpr int GROUPS = D / GS;
constexpr int TILES_PER_GROUP = GS / 8;
constexpr int SCORE_RUN = GS / 4;               // dims of a group in a lane's K elements
constexpr int OUT_RUN = GS / 8;                 // dims of a group in a lane's V elements
constexpr bool SCORES16 = SCORE_MANTISSA != 0;
constexpr int K_RUNS = SCORES16 ? 1 : 2;        // runs of K codes a lane reads of a group
constexpr int TILES16 = D / 16;                 // 16-dim tiles of Q and K (SCORES16)
constexpr int TILES16_PER_GROUP = GS / 16;
constexpr int PAIRS_PER_WORD = 16 / BITS;       // fa_code_pair's pairs of codes in a code word
// How far (base 2) a score may pass its row's softmax base before the base moves: quantized K/V's
// weights go to the output as three bf16 parts, which hold any float; plain K/V's as f16 / bf16
// parts scaled by WEIGHT_SCALE for weights of at most 1, so there the base is the running max.
constexpr float BASE_SLACK = FA_QUANTIZED ? 8.0f : 0.0f;
#if FA_QUANTIZED
constexpr bool OUT16 = OUT_MANTISSA != 0;
constexpr int V_UNIT_BITS = OUT16 ? OUT_MANTISSA : BITS;  // V codes as 1 + c / 2^V_UNIT_BITS
constexpr int ROW_WORDS = D * BITS / 32;        // a key's code words
using Stage = fa_qmma_stage<ROW_WORDS>;
#endif

// Where the threadgroup works (fa_grid_position); its request and keys after the strides.
const fa_grid_position grid = fa_grid_position_of<ROWS>(threadgroup_position_in_grid, dims);
const int L = grid.L, G = grid.G, group_rows = grid.group_rows;
const int block = grid.block, tile = grid.tile, kv_head = grid.kv_head, n = grid.n;
const int sg = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const int tid = int(thread_index_in_threadgroup);

// The inputs' shapes and strides by the axes of the 5-D form (fa_axes5; LAYERED: the caller
// passed the layer axis).
const auto q_shape5 = fa_axes5_of<LAYERED>(q_shape);
const auto q_strides5 = fa_axes5_of<LAYERED>(q_strides);
#if FA_QUANTIZED
const auto k_codes_shape5 = fa_axes5_of<LAYERED>(k_codes_shape);
const auto v_codes_shape5 = fa_axes5_of<LAYERED>(v_codes_shape);
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
const fa_request_keys keys = fa_request_keys_of(grid, key_ranges, q_shape5, k_codes_shape5);
#else
const fa_request_keys keys = fa_request_keys_of(grid, key_ranges, q_shape5, k_shape5);
#endif
const int S = keys.S, H_q = keys.H_q, NB = keys.NB, layer = keys.layer, request = keys.request;
const int key_end = keys.key_end, lo = keys.lo, hi = keys.hi;
const float scale = scalars[0] * FA_LOG2_E;
#if FA_QUANTIZED
const uint32_t code_one = as_type<uint32_t>(scalars[1]);  // 1.0f (fa_code_unit)
const uint32_t pair_one = uint32_t(as_type<ushort>(static_cast<T>(scalars[1]))) * 0x10001u;  // (fa_code_pair)
const uint32_t out_pair_one = uint32_t(as_type<ushort>(static_cast<OT>(scalars[1]))) * 0x10001u;
#endif

// Query row r of the tile: its first element (q_at), whether it exists, the last key it may see
// (causal alignment included; -1 for padding rows) and its mask row.
#define FA_ROW(r) (tile * ROWS + (r))
#define FA_ROW_LIVE(r) (FA_ROW(r) < group_rows)
#define FA_ROW_HEAD(r) (kv_head * G + (FA_ROW_LIVE(r) ? FA_ROW(r) : 0) / L)
const auto q_at = q + layer * q_strides5[0] + request * q_strides5[1];
#define FA_Q_ROW(r) (q_at + FA_ROW_HEAD(r) * q_strides5[2] + (FA_ROW(r) % L) * q_strides5[3])

// Q^T as B operands (dims x query rows): one per 8-dim tile in float, or (SCORES16) one per
// 16-dim tile in T, as loaded.
fa_frag q_frag[TILES];
fa_frag16 q16[TILES16];
if (SCORES16) {
  #pragma unroll
  for (int e = 0; e < 4; ++e) {  // element e: the low (even e) or high half of word e / 2
    const int r = fa_frag16_col_b(lane, e);
    const bool live = FA_ROW_LIVE(r);
    const auto q_row = FA_Q_ROW(r);
    #pragma unroll
    for (int i = 0; i < TILES16; ++i) {
      const int d = fa_run_dim<4, GS / 4, !FA_QUANTIZED>(fa_qmma_score_dim16<GS, BITS>(i, fa_frag16_k_b(lane, e)));
      const uint32_t bits = live ? as_type<ushort>(q_row[d * q_strides5[4]]) : 0u;
      q16[i].w[e / 2] = e % 2 == 0 ? bits : q16[i].w[e / 2] | bits << 16;
    }
  }
} else {
  #pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int r = fa_frag_col_b(lane, j);
    const bool live = FA_ROW_LIVE(r);
    const auto q_row = FA_Q_ROW(r);
    #pragma unroll
    for (int i = 0; i < TILES; ++i) {
      const int d = fa_qmma_score_dim<GS>(i, fa_frag_row_b(lane, j));
      q_frag[i].e[j] = live ? float(q_row[d * q_strides5[4]]) : 0.0f;
    }
  }
}
#if FA_QUANTIZED
// Sums of q over each group (the bias term of a score), as accumulators: ones times Q^T.
fa_frag q_sum_frag[GROUPS][2];
fa_frag ones;
ones.e[0] = 1.0f;
ones.e[1] = 1.0f;
fa_frag16 ones16;
ones16.w[0] = pair_one;
ones16.w[1] = pair_one;
#pragma unroll
for (int g = 0; g < GROUPS; ++g) {
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    q_sum_frag[g][h].e[0] = 0.0f;
    q_sum_frag[g][h].e[1] = 0.0f;
  }
}
#pragma unroll
for (int i = 0; i < (SCORES16 ? TILES16 : TILES); ++i) {
  const int g = i / (SCORES16 ? TILES16_PER_GROUP : TILES_PER_GROUP);
  if (SCORES16) {
    fa_mma2_16<T>(q_sum_frag[g][0], q_sum_frag[g][1], ones16, ones16, q16[i], q_sum_frag[g][0], q_sum_frag[g][1]);
  } else {
    fa_mma2(q_sum_frag[g][0], q_sum_frag[g][1], ones, ones, q_frag[i], q_sum_frag[g][0], q_sum_frag[g][1]);
  }
}
float q_sum[GROUPS][2];
float bias_sum[GROUPS][2];
#endif
// The softmax state of this lane's two accumulator columns (query rows): max (the same in each
// lane holding the row), this lane's share of the denominator and of the V bias term, and the
// output tiles O^T (dims x rows).
float row_max[2];
float row_sum[2];
int last_key[2];
int64_t mask_row[2];  // MASK >= 2: offset of the row's mask row
fa_frag out_frag[TILES];
#pragma unroll
for (int j = 0; j < 2; ++j) {
  const int r = fa_frag_col_acc(lane, j);
#if FA_QUANTIZED
  #pragma unroll
  for (int g = 0; g < GROUPS; ++g) {
    q_sum[g][j] = q_sum_frag[g][0].e[j];
    bias_sum[g][j] = 0.0f;
  }
#endif
  row_max[j] = -INFINITY;
  row_sum[j] = 0.0f;
  last_key[j] = fa_last_key<MASK>(FA_ROW_LIVE(r), FA_ROW(r) % L, L, key_end);
  mask_row[j] = fa_mask_row<MASK>(mask_strides, layer, request, FA_ROW_HEAD(r), FA_ROW(r) % L);
}
#pragma unroll
for (int i = 0; i < TILES; ++i) {
  out_frag[i].e[0] = 0.0f;
  out_frag[i].e[1] = 0.0f;
}

#if FA_QUANTIZED
const auto k_row = fa_pin(k_codes + layer * k_codes_strides5[0] + request * k_codes_strides5[1] + kv_head * k_codes_strides5[2]);
const auto v_row = fa_pin(v_codes + layer * v_codes_strides5[0] + request * v_codes_strides5[1] + kv_head * v_codes_strides5[2]);
const auto ks_row = fa_pin(k_scales + layer * k_scales_strides5[0] + request * k_scales_strides5[1] + kv_head * k_scales_strides5[2]);
const auto kb_row = fa_pin(k_biases + layer * k_biases_strides5[0] + request * k_biases_strides5[1] + kv_head * k_biases_strides5[2]);
const auto vs_row = fa_pin(v_scales + layer * v_scales_strides5[0] + request * v_scales_strides5[1] + kv_head * v_scales_strides5[2]);
const auto vb_row = fa_pin(v_biases + layer * v_biases_strides5[0] + request * v_biases_strides5[1] + kv_head * v_biases_strides5[2]);
#else
const auto k_row = k + layer * k_strides5[0] + request * k_strides5[1] + kv_head * k_strides5[2];
const auto v_row = v + layer * v_strides5[0] + request * v_strides5[1] + kv_head * v_strides5[2];
#endif

// A tile's loads (fa_qmma_tile, fa_pmma_tile), made ahead: plain K/V's a tile ahead, quantized
// K/V's in two parts, each right after its last use. Keys past the block are read as its last key
// (or key 0 when the block is empty) and are scored -inf. Where the arrays allow 32-bit offsets
// (OFFSETS32 and fa_narrow_rows: rows contiguous, every offset of a head's rows within 32 bits, as
// in mx.quantize's output and the caches sliced from it) a key's address takes two instructions
// instead of about six (quantized: from row pointers held whole, fa_pin). The loop is written
// once and unrolled into a pass for each value of `narrow`, so that each pass folds it; a branch
// around the loads inside one loop would let the compiler merge both forms' loads into one, with
// an address register for each.
const int last_readable = metal::max(hi, 1) - 1;
constexpr int TILE_STRIDE = NSG * TILE_KEYS;
#if FA_QUANTIZED
// STAGES > 0: the 32-bit pass stages each simdgroup's tiles through threadgroup memory, STAGES
// of them ahead of the one it works on (fa_qmma_stage_tile: fa_copy_async, on CUDA cp.async),
// and reads each part from there where it would read device memory. The tiles in flight then
// hold no registers: loads from device memory have STAGES tiles' time to arrive, not a part's.
// A tile stages in 16-byte pieces of codes and 4, 8 or 16 bytes of scales a key and array (what
// cp.async copies); gpu.quantized_stages asks for no more.
constexpr bool STAGEABLE = ROW_WORDS % 4 == 0 && (GROUPS * sizeof(ST) == 4 || GROUPS * sizeof(ST) == 8 ||
                                                  GROUPS * sizeof(ST) == 16);
constexpr int STAGE_SLOTS = STAGES > 0 && STAGEABLE ? NSG * STAGES : 0;
alignas(16) threadgroup uint32_t tg_stage_codes[STAGE_SLOTS > 0 ? STAGE_SLOTS * Stage::CODE_WORDS : 4];
alignas(16) threadgroup ST tg_stage_scales[STAGE_SLOTS > 0 ? STAGE_SLOTS * 4 * TILE_KEYS * GROUPS : 8];
// The 32-bit pass also loads a key's scales and biases whole (fa_load_chunk; on CUDA one load for
// two groups), so it needs every scale array's rows aligned for that (fa_packed_rows); staged, it
// copies code rows in 16-byte pieces, aligned as well.
const bool narrow = OFFSETS32 && fa_narrow_rows(k_codes_strides5, S, k_codes_shape5[4]) &&
    fa_narrow_rows(v_codes_strides5, S, v_codes_shape5[4]) && fa_narrow_rows(k_scales_strides5, S, GROUPS) &&
    fa_same_strides(k_scales_strides5, k_biases_strides5) && fa_same_strides(k_scales_strides5, v_scales_strides5) &&
    fa_same_strides(k_scales_strides5, v_biases_strides5) && fa_packed_rows<GROUPS>(ks_row, k_scales_strides5[3], 1) &&
    fa_packed_rows<GROUPS>(kb_row, k_scales_strides5[3], 1) && fa_packed_rows<GROUPS>(vs_row, k_scales_strides5[3], 1) &&
    fa_packed_rows<GROUPS>(vb_row, k_scales_strides5[3], 1) &&
    (STAGE_SLOTS == 0 ||
     (fa_packed_rows<4>(k_row, k_codes_strides5[3], 1) && fa_packed_rows<4>(v_row, v_codes_strides5[3], 1)));
const fa_stage_strides code_stage_strides = {Stage::PITCH};
const fa_stage_strides scale_stage_strides = {GROUPS};
#else
// Whole vector loads of a lane's runs where every row allows them (fa_load_chunk); the 32-bit
// pass takes them only, so that it holds no element-wise loads.
const bool packed = fa_pmma_packed_rows<T, D>(k_row, k_strides5) && fa_pmma_packed_rows<T, D>(v_row, v_strides5);
const bool narrow = OFFSETS32 && packed && fa_narrow_rows(k_strides5, S, D) && fa_narrow_rows(v_strides5, S, D);
#endif
#pragma unroll
for (int pass = 0; pass < 2; ++pass) {
  const bool narrow_pass = pass == 0;
  if (narrow_pass != narrow) {
    continue;
  }
#if FA_QUANTIZED
  // Each part of the tile is loaded again, for the next tile, right after its last use here: the
  // K part after the scores, the V part after the output (no copy of a tile from one to the next).
  // This simdgroup's tile n (its first key `at`): in stage slot n % STAGES when staged.
  const bool staged = STAGE_SLOTS > 0 && narrow_pass;
#define FA_STAGE_CODES(n) (tg_stage_codes + (sg * STAGES + (n) % STAGES) * Stage::CODE_WORDS)
#define FA_STAGE_SCALES(n) (tg_stage_scales + (sg * STAGES + (n) % STAGES) * 4 * TILE_KEYS * GROUPS)
#define FA_LOAD_PART(KEYS, n, at) \
  if (staged) { \
    fa_qmma_load_tile<OUT16, KEYS>(now, true, 0, TILE_KEYS - 1, lane, code_one, FA_STAGE_CODES(n), code_stage_strides, \
        FA_STAGE_CODES(n) + TILE_KEYS * Stage::PITCH, code_stage_strides, FA_STAGE_SCALES(n), scale_stage_strides, \
        FA_STAGE_SCALES(n) + TILE_KEYS * GROUPS, scale_stage_strides, FA_STAGE_SCALES(n) + 2 * TILE_KEYS * GROUPS, \
        scale_stage_strides, FA_STAGE_SCALES(n) + 3 * TILE_KEYS * GROUPS, scale_stage_strides); \
  } else { \
    fa_qmma_load_tile<OUT16, KEYS>(now, narrow_pass, at, last_readable, lane, code_one, k_row, k_codes_strides5, \
        v_row, v_codes_strides5, ks_row, k_scales_strides5, kb_row, k_biases_strides5, vs_row, v_scales_strides5, \
        vb_row, v_biases_strides5); \
  }
  // Copies tile n into its slot (none past the block: an empty batch keeps the count).
#define FA_STAGE_TILE(n) \
  if (lo + sg * TILE_KEYS + (n) * TILE_STRIDE < hi) { \
    fa_qmma_stage_tile<ROW_WORDS, GROUPS>(FA_STAGE_CODES(n), FA_STAGE_SCALES(n), \
        lo + sg * TILE_KEYS + (n) * TILE_STRIDE, last_readable, lane, k_row, k_codes_strides5, v_row, \
        v_codes_strides5, ks_row, kb_row, vs_row, vb_row, k_scales_strides5); \
  } \
  fa_copy_commit()
  constexpr int STAGES_PENDING = STAGES > 0 ? STAGES - 1 : 0;  // batches after the next tile's
  // Tiles PREFETCH_TILES ahead of this one are asked into L2 (fa_qmma_prefetch_tile), so that
  // their loads wait on it and not on device memory.
#define FA_PREFETCH(at) fa_qmma_prefetch_tile<ROW_WORDS>(narrow_pass, at, last_readable, lane, k_row, k_codes_strides5, \
    v_row, v_codes_strides5, ks_row, k_scales_strides5, kb_row, k_biases_strides5, vs_row, v_scales_strides5, vb_row, \
    v_biases_strides5)
  for (int ahead = 1; ahead < PREFETCH_TILES; ++ahead) {
    FA_PREFETCH(lo + sg * TILE_KEYS + ahead * TILE_STRIDE);
  }
  fa_qmma_tile<GROUPS, SCORE_RUN, OUT_RUN, BITS, ST, K_RUNS> now;
  if (staged) {
    for (int ahead = 0; ahead < STAGES; ++ahead) {
      FA_STAGE_TILE(ahead);
    }
    fa_copy_wait<STAGES_PENDING>();
  }
  FA_LOAD_PART(true, 0, lo + sg * TILE_KEYS);
  FA_LOAD_PART(false, 0, lo + sg * TILE_KEYS);
  for (int first = lo + sg * TILE_KEYS, sg_tile = 0; first < hi; first += TILE_STRIDE, ++sg_tile) {
    if (staged) {  // tile sg_tile is in registers, its slot read out: tile sg_tile + STAGES takes it
      simdgroup_barrier(mem_flags::mem_threadgroup);
      FA_STAGE_TILE(sg_tile + STAGES);
    }
    if (PREFETCH_TILES > 0 && first + PREFETCH_TILES * TILE_STRIDE < hi) {
      FA_PREFETCH(first + PREFETCH_TILES * TILE_STRIDE);
    }
#else
  // Tiles PREFETCH_TILES ahead of the one being loaded are asked into L2 (fa_pmma_prefetch_tile):
  // a split launch of few threadgroups (gpu.PLAIN_PREFETCH_MAX_THREADGROUPS) has few loads in flight.
#define FA_PREFETCH(at) fa_pmma_prefetch_tile<D>(narrow_pass, at, last_readable, lane, k_row, k_strides5, v_row, v_strides5)
  for (int ahead = 1; ahead < PREFETCH_TILES; ++ahead) {
    FA_PREFETCH(lo + sg * TILE_KEYS + ahead * TILE_STRIDE);
  }
  fa_pmma_tile<T, D> next_tile;
  for (int first = lo + sg * TILE_KEYS - TILE_STRIDE; first < hi; first += TILE_STRIDE) {
    if (PREFETCH_TILES > 0 && first + (PREFETCH_TILES + 1) * TILE_STRIDE < hi) {
      FA_PREFETCH(first + (PREFETCH_TILES + 1) * TILE_STRIDE);
    }
    fa_pmma_tile<T, D> now = next_tile;
    fa_pmma_load_tile(next_tile, narrow_pass, narrow_pass || packed, first + TILE_STRIDE, last_readable, lane, k_row, k_strides5,
                      v_row, v_strides5);
    if (first < lo) {
      continue;  // the first iteration only issues the first tile's loads
    }
#endif
#if FA_QUANTIZED
    // K codes read as 1 + c / 2^BITS (fa_code_unit, fa_code_pair), V codes as 1 + c / 2^V_UNIT_BITS
    // (fa_code_pair_keys when OUT16): the scales and biases that undo it.
    float k_unit_scale[2][GROUPS];
    float k_unit_bias[2][GROUPS];
    float v_unit_bias[2][GROUPS];
    float v_unit_scale[2][2][GROUPS];
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      #pragma unroll
      for (int g = 0; g < GROUPS; ++g) {
        k_unit_scale[h][g] = fa_unit_scale<BITS>(now.k_scale[h][g]);
        k_unit_bias[h][g] = fa_unit_bias<BITS>(now.k_scale[h][g], now.k_bias[h][g]);
        v_unit_bias[h][g] = fa_unit_bias<V_UNIT_BITS>(now.v_row_scale[h][g], now.v_bias[h][g]);
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          v_unit_scale[h][j][g] = fa_unit_scale<V_UNIT_BITS>(now.v_scale[h][j][g]);
        }
      }
    }
#endif
    // Scores S^T of the tile's two halves, one accumulator pair per K group.
    fa_frag group_score[GROUPS][2];
    #pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
      #pragma unroll
      for (int h = 0; h < 2; ++h) {
        group_score[g][h].e[0] = 0.0f;
        group_score[g][h].e[1] = 0.0f;
      }
    }
    #pragma unroll
    for (int i = 0; i < (SCORES16 ? TILES16 : TILES); ++i) {
      const int g = i / (SCORES16 ? TILES16_PER_GROUP : TILES_PER_GROUP);
      if (SCORES16) {
        fa_frag16 k16[2];
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          #pragma unroll
          for (int w = 0; w < 2; ++w) {
            const int pair = i % TILES16_PER_GROUP * 2 + w;  // as fa_qmma_score_dim16 places it
#if FA_QUANTIZED
            k16[h].w[w] = fa_code_pair<BITS, SCORE_MANTISSA>(now.k_codes[h][0][g].words[pair / PAIRS_PER_WORD],
                                                              pair % PAIRS_PER_WORD * BITS, pair_one);
#else
            k16[h].w[w] = fa_chunk_pair(now.k[h], pair);
#endif
          }
        }
        fa_mma2_16<T>(group_score[g][0], group_score[g][1], k16[0], k16[1], q16[i], group_score[g][0],
                      group_score[g][1]);
      } else {
#if FA_QUANTIZED
        fa_frag k_frag[2];
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            k_frag[h].e[j] = now.k_codes[h][j][g][i % TILES_PER_GROUP * 2 + fa_frag_col_a(lane, j) / 4];
          }
        }
        fa_mma2(group_score[g][0], group_score[g][1], k_frag[0], k_frag[1], q_frag[i], group_score[g][0],
                group_score[g][1]);
#endif
      }
    }
    float score[2][2];  // [half][row]
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = first + h * HALF_KEYS + fa_frag_row(lane);
      #pragma unroll
      for (int j = 0; j < 2; ++j) {
#if FA_QUANTIZED
        float s = 0.0f;
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          s += group_score[g][h].e[j] * k_unit_scale[h][g] + q_sum[g][j] * k_unit_bias[h][g];
        }
#else
        const float s = group_score[0][h].e[j];
#endif
        score[h][j] = fa_masked_score<MASK>(s * scale, key, hi, last_key[j], mask, mask_row[j], mask_strides);
      }
    }
#if FA_QUANTIZED
    if (staged) {
      fa_copy_wait<STAGES_PENDING>();
    }
    FA_LOAD_PART(true, sg_tile + 1, first + TILE_STRIDE);
#endif
    // Online softmax of each row over the lanes that hold it, against a base (the row's max when
    // it last moved) that moves only where a score passes it by more than BASE_SLACK. Only then do
    // the lanes combine the rows' maxima (three shuffles a row) and rescale, the whole simdgroup
    // at once (its products need every lane): most tiles skip both. Weights reach 2^BASE_SLACK.
    bool passed = false;
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      passed = passed || metal::max(score[0][j], score[1][j]) > row_max[j] + BASE_SLACK;
    }
    if (simd_any(passed)) {
      #pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float new_max = metal::max(row_max[j], fa_frag_col_max(metal::max(score[0][j], score[1][j])));
        const float rescale = fa_exp2(row_max[j] - fa_weight_base(new_max));
        row_max[j] = new_max;
        row_sum[j] *= rescale;
#if FA_QUANTIZED
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          bias_sum[g][j] = fa_scaled(bias_sum[g][j], rescale);
        }
#endif
        #pragma unroll
        for (int i = 0; i < TILES; ++i) {
          out_frag[i].e[j] = fa_scaled(out_frag[i].e[j], rescale);
        }
      }
    }
    float weight_base[2];
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      weight_base[j] = fa_weight_base(row_max[j]);
    }
    // The weights P^T (keys x rows), then as B operands scaled for each V group. A key a row
    // weighs 0 (hidden from it, or a weight that underflows) never touches that row: codes are
    // finite, so zeroing the weight times its scale and bias is enough, NaN included; plain V
    // elements of keys that no row weighs are zeroed, and a tile whose other keys' V hold NaN or
    // Inf takes the product a row at a time (below).
    fa_frag p[2];   // [half]
#if !FA_QUANTIZED
    uint seen = 0;  // bit h * 8 + key of a half: some row of the tile weighs that key
    uint zero = 0;  // likewise: some row of the tile weighs that key 0
#endif
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      thread fa_frag& p_h = p[h];
      #pragma unroll
      for (int j = 0; j < 2; ++j) {
        p_h.e[j] = fa_exp2(score[h][j] - weight_base[j]);
        row_sum[j] += p_h.e[j];
#if FA_QUANTIZED
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          bias_sum[g][j] += p_h.e[j] == 0.0f ? 0.0f : p_h.e[j] * v_unit_bias[h][g];
        }
#else
        seen |= p_h.e[j] != 0.0f ? 1u << (h * HALF_KEYS + fa_frag_row(lane)) : 0u;
        zero |= p_h.e[j] == 0.0f ? 1u << (h * HALF_KEYS + fa_frag_row(lane)) : 0u;
        p_h.e[j] *= WEIGHT_SCALE;
#endif
      }
    }
#if FA_QUANTIZED
    // O^T += V_G^T P_G^T, two 8-dim tiles (of one group) at a time: with 16-bit operands over the
    // whole tile (a word of V^T pairs two keys of one dim), else over each half.
    if (OUT16) {
      fa_frag16f p_b;
      fa_accs_as_b16(p[0], p[1], lane, p_b);
      fa_frag16f weights[GROUPS];
      #pragma unroll
      for (int g = 0; g < GROUPS; ++g) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {  // element e: key fa_frag16_k_b(lane, e), loaded as v_scale[e / 2][e % 2]
          weights[g].e[e] = p_b.e[e] == 0.0f ? 0.0f : p_b.e[e] * v_unit_scale[e / 2][e % 2][g];
        }
      }
      #pragma unroll
      for (int i = 0; i < TILES; i += 2) {
        const int g = i / TILES_PER_GROUP;
        fa_frag16 v16[2];
        #pragma unroll
        for (int t = 0; t < 2; ++t) {
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            v16[t].w[h] = fa_code_pair_keys<BITS, OUT_MANTISSA>(now.v_codes[h][0][g], now.v_codes[h][1][g],
                                                                (i + t) % TILES_PER_GROUP, out_pair_one);
          }
        }
        fa_mma2_16_any_b<OT, 3>(out_frag[i], out_frag[i + 1], v16[0], v16[1], weights[g], out_frag[i], out_frag[i + 1]);
      }
    } else {
      fa_frag weights[GROUPS][2];
      #pragma unroll
      for (int h = 0; h < 2; ++h) {
        const fa_frag p_b = fa_acc_as_b(p[h], lane);
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            weights[g][h].e[j] = p_b.e[j] == 0.0f ? 0.0f : p_b.e[j] * v_unit_scale[h][j][g];
          }
        }
      }
      #pragma unroll
      for (int i = 0; i < TILES; i += 2) {
        const int g = i / TILES_PER_GROUP;
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          fa_frag v_frag[2];
          #pragma unroll
          for (int t = 0; t < 2; ++t) {
            #pragma unroll
            for (int j = 0; j < 2; ++j) {
              v_frag[t].e[j] = now.v_codes[h][j][g][(i + t) % TILES_PER_GROUP];
            }
          }
          fa_mma2_any_b(out_frag[i], out_frag[i + 1], v_frag[0], v_frag[1], weights[g][h], out_frag[i], out_frag[i + 1]);
        }
      }
    }
    FA_LOAD_PART(false, sg_tile + 1, first + TILE_STRIDE);
#undef FA_LOAD_PART
#undef FA_STAGE_TILE
#undef FA_STAGE_CODES
#undef FA_STAGE_SCALES
#undef FA_PREFETCH
#else
    seen = simd_or(seen);
    if (seen != (1u << TILE_KEYS) - 1u) {  // the same in every lane: a branch of the whole simdgroup
      #pragma unroll
      for (int h = 0; h < 2; ++h) {
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          if ((seen >> fa_frag16_k_a(lane, 2 * h + j) & 1u) == 0u) {
            now.v[h][j] = fa_chunk<T, OUT_RUN>();
          }
        }
      }
    }
    // A key that some rows weigh and others weigh 0 (a causal edge, a per-row mask, a weight that
    // underflows) is harmless in the product unless its V holds NaN or Inf, which 0 * NaN would
    // bring to the rows that weigh it 0. Only then (garbage in the cache: rare, and checked only
    // in tiles with such keys) does the product run once a row, with V zeroed at the keys that
    // row weighs 0, keeping that row's column: the same operations on its column as otherwise.
    const uint partial = seen & simd_or(zero);
    bool garbage = false;
    if (partial != 0u) {  // the same in every lane, as below
      #pragma unroll
      for (int h = 0; h < 2; ++h) {
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          if ((partial >> fa_frag16_k_a(lane, 2 * h + j) & 1u) != 0u) {
            #pragma unroll
            for (int e = 0; e < OUT_RUN; ++e) {
              garbage = garbage || !fa_finite(now.v[h][j][e]);
            }
          }
        }
      }
      garbage = simd_any(garbage);
    }
    // O^T += V^T P^T over the whole tile, two 8-dim tiles at a time: V^T in T as loaded (a word
    // pairs two keys of one dim), the weights in float (fa_mma2_16_any_b).
    fa_frag16f weights;
    fa_accs_as_b16(p[0], p[1], lane, weights);
    if (!garbage) {
      #pragma unroll
      for (int i = 0; i < TILES; i += 2) {
        fa_frag16 v16[2];
        #pragma unroll
        for (int t = 0; t < 2; ++t) {
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            v16[t].w[h] = fa_chunks_word(now.v[h][0], now.v[h][1], i + t);
          }
        }
        fa_mma2_16_any_b<T>(out_frag[i], out_frag[i + 1], v16[0], v16[1], weights, out_frag[i], out_frag[i + 1]);
      }
    } else {
      // Row r's column of C is still as before the tile when row r's product runs: each row
      // overwrites its own column only.
      for (int r = 0; r < ROWS; ++r) {
        uint mine = 0;  // bit h * 8 + key: row r weighs that key
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            mine |= fa_frag_col_acc(lane, j) == r && p[h].e[j] != 0.0f ? 1u << (h * HALF_KEYS + fa_frag_row(lane)) : 0u;
          }
        }
        const uint weighs = simd_or(mine);
        fa_chunk<T, OUT_RUN> v_row[2][2];  // V of the keys row r weighs, zeros elsewhere
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            v_row[h][j] = (weighs >> fa_frag16_k_a(lane, 2 * h + j) & 1u) != 0u ? now.v[h][j] : fa_chunk<T, OUT_RUN>();
          }
        }
        #pragma unroll
        for (int i = 0; i < TILES; i += 2) {
          fa_frag16 v16[2];
          #pragma unroll
          for (int t = 0; t < 2; ++t) {
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
              v16[t].w[h] = fa_chunks_word(v_row[h][0], v_row[h][1], i + t);
            }
          }
          fa_frag row_out[2];
          fa_mma2_16_any_b<T>(row_out[0], row_out[1], v16[0], v16[1], weights, out_frag[i], out_frag[i + 1]);
          #pragma unroll
          for (int j = 0; j < 2; ++j) {
            const bool its = fa_frag_col_acc(lane, j) == r;
            out_frag[i].e[j] = its ? row_out[0].e[j] : out_frag[i].e[j];
            out_frag[i + 1].e[j] = its ? row_out[1].e[j] : out_frag[i + 1].e[j];
          }
        }
      }
    }
#endif
  }
}

// Each row's denominator and V bias term over the lanes that hold it; then the simdgroups merge
// through threadgroup memory, as in decode_attention.metal.
#pragma unroll
for (int j = 0; j < 2; ++j) {
  row_sum[j] = fa_frag_col_sum(row_sum[j]);
#if FA_QUANTIZED
  #pragma unroll
  for (int g = 0; g < GROUPS; ++g) {
    bias_sum[g][j] = fa_frag_col_sum(bias_sum[g][j]);
  }
#endif
}
threadgroup float tg_max[NSG * ROWS];
threadgroup float tg_sum[NSG * ROWS];
threadgroup float tg_acc[NSG * ROWS * D];
#pragma unroll
for (int j = 0; j < 2; ++j) {
  const int r = fa_frag_col_acc(lane, j);
  #pragma unroll
  for (int i = 0; i < TILES; ++i) {
    const int d = fa_run_dim<8, GS / 8, !FA_QUANTIZED>(fa_qmma_out_dim<GS>(i, fa_frag_row(lane)));
#if FA_QUANTIZED
    tg_acc[(sg * ROWS + r) * D + d] = out_frag[i].e[j] + bias_sum[i / TILES_PER_GROUP][j];
#else
    tg_acc[(sg * ROWS + r) * D + d] = out_frag[i].e[j] * (1.0f / WEIGHT_SCALE);
#endif
  }
  if (fa_frag_row(lane) == 0) {  // one lane of each row
    tg_max[sg * ROWS + r] = row_max[j];
    tg_sum[sg * ROWS + r] = row_sum[j];
  }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
// A row at a time (the live rows come first): its merge weights once, then its D elements over
// the threads (not the weights again for each element).
for (int r = 0; r < ROWS && FA_ROW_LIVE(r); ++r) {
  const int64_t out_row = (int64_t(n) * H_q + FA_ROW_HEAD(r)) * L + FA_ROW(r) % L;
  const fa_merged<NSG> merged = fa_merge_weights<NSG>(tg_max + r, tg_sum + r, ROWS);
  for (int d = tid; d < D; d += THREADS) {
    const float o = fa_merge_outputs(merged, tg_acc + r * D + d, ROWS * D);
#if FA_SINGLE_PASS
    out[out_row * D + d] = static_cast<T>(fa_normalise(o, merged.l));
#else
    out_partial[(out_row * NB + block) * D + d] = o;
    if (d == 0) {
      stats_partial[(out_row * NB + block) * 2] = merged.m;
      stats_partial[(out_row * NB + block) * 2 + 1] = merged.l;
    }
#endif
  }
}
