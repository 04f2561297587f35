// Helpers shared by the decode-attention kernels (header of every kernel in this folder).
//
// Written in Metal. On NVIDIA, cuda_compat.h is placed before this file and maps the few
// Metal names used here (address-space qualifiers, METAL_FUNC, metal::max/min, as_type) to CUDA.

#ifndef METAL_FUNC
#define METAL_FUNC inline
#endif

// The smallest power of two >= X: lanes that share a row must form a shuffle-xor group.
template <int X>
struct fa_pow2_at_least {
  static constexpr int value = 2 * fa_pow2_at_least<(X + 1) / 2>::value;
};
template <>
struct fa_pow2_at_least<1> {
  static constexpr int value = 1;
};
// log2 of a power of two X.
template <int X>
struct fa_log2 {
  static constexpr int value = 1 + fa_log2<X / 2>::value;
};
template <>
struct fa_log2<1> {
  static constexpr int value = 0;
};

// E elements of a plain K/V row, kept as loaded until used: `chunk[e]` widens element e to
// float. Holding the narrow form keeps U keys in flight within the register budget.
// fa_load_chunk fills one: `packed` says the elements are contiguous (and, where the platform
// loads them as one vector, aligned for it) in every row; otherwise they are `step` apart.
// fa_packed_rows tells which, once per kernel, for rows `key_step` elements apart. A chunk may
// come in pieces of PIECE elements GAP elements apart (fa_run_dim): element e is the row's
// element e / PIECE * GAP + e % PIECE.
#ifndef FA_HAVE_CHUNK
template <typename T, int E>
struct fa_chunk {
  T x[E];
  METAL_FUNC float operator[](int e) const {
    return float(x[e]);
  }
};
template <int E, typename Ptr>
METAL_FUNC bool fa_packed_rows(Ptr row, int64_t key_step, int64_t step) {
  return step == 1;
}
template <int E, int PIECE = E, int GAP = PIECE, typename Ptr, typename T>
METAL_FUNC void fa_load_chunk(Ptr p, int64_t step, bool packed, thread fa_chunk<T, E>& out) {
  for (int e = 0; e < E; ++e) {
    const int at = e / PIECE * GAP + e % PIECE;
    out.x[e] = p[packed ? at : at * step];
  }
}
// Elements 2r and 2r + 1 of a chunk of 16-bit T as one 32-bit word (low half first): a word of a
// 16-bit matrix operand (fa_frag16).
template <typename T, int E>
METAL_FUNC uint32_t fa_chunk_pair(thread const fa_chunk<T, E>& c, int r) {
  return uint32_t(as_type<ushort>(c.x[2 * r])) | uint32_t(as_type<ushort>(c.x[2 * r + 1])) << 16;
}
// Element e of two chunks of 16-bit T as one 32-bit word, `lo`'s in the low half: a word of a
// 16-bit matrix operand that pairs two keys of one dim (decode_mma.metal's V^T).
template <typename T, int E>
METAL_FUNC uint32_t fa_chunks_word(thread const fa_chunk<T, E>& lo, thread const fa_chunk<T, E>& hi, int e) {
  return uint32_t(as_type<ushort>(lo.x[e])) | uint32_t(as_type<ushort>(hi.x[e])) << 16;
}
#endif

// A pointer the compiler keeps whole (on CUDA: cuda_compat.h); here as it is.
#ifndef FA_HAVE_PIN
template <typename P> METAL_FUNC P fa_pin(P p) { return p; }
#endif

// N elements from device memory at src to threadgroup memory at dst, in flight until the
// simdgroup's fa_copy_wait (on CUDA: cp.async, cuda_compat.h); here copied at once. Batches of
// copies end with fa_copy_commit; fa_copy_wait<PENDING> waits until at most PENDING of the
// simdgroup's batches are still in flight, and is a barrier of its lanes' threadgroup memory.
#ifndef FA_HAVE_COPY_ASYNC
template <int N, typename Dst, typename Src>
METAL_FUNC void fa_copy_async(Dst dst, Src src) {
  for (int i = 0; i < N; ++i) {
    dst[i] = src[i];
  }
}
METAL_FUNC void fa_copy_commit() {}
template <int PENDING>
METAL_FUNC void fa_copy_wait() {
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
#endif

// A hint that *p will be loaded soon (on CUDA: cuda_compat.h); here nothing.
#ifndef FA_HAVE_PREFETCH
template <typename P> METAL_FUNC void fa_prefetch(P p) {}
#endif

// 2^x, exactly 0 at x = -inf: a hidden key's weight must be 0, not merely tiny.
#ifndef FA_HAVE_EXP2
METAL_FUNC float fa_exp2(float x) {
  return x == -INFINITY ? 0.0f : metal::exp2(x);
}
#endif

// What a row's weights 2^(score - base) are taken against, for its running max m: m itself, or 0
// while the row has seen no key (m = -inf), so that its -inf scores weigh 0 and not NaN.
METAL_FUNC float fa_weight_base(float m) {
  return m == -INFINITY ? 0.0f : m;
}

// The end of a request's keys from its second key_ranges word: a length (from the start), or,
// negative, -(right + 1) for a range that ends `right` keys before S. The second form stays the
// same while a decode loop's S grows, so one array serves every step (KeyRanges.from_padding).
METAL_FUNC int fa_key_range_end(int start, int second, int S) {
  return second >= 0 ? start + second : S + 1 + second;
}

// A query row of a kernel's tile (position `position` of L, `live` unless it pads the tile): the
// last key it may see, causal alignment included (MASK 1), -1 for a padding row; and the offset of
// its row of a boolean or additive mask (MASK >= 2, strides of the (NL, B, H_q, L, S) view).
template <int MASK>
METAL_FUNC int fa_last_key(bool live, int position, int L, int key_end) {
  return !live ? -1 : (MASK == 1 ? key_end - L + position : key_end - 1);
}
template <int MASK, typename Strides>
METAL_FUNC int64_t fa_mask_row(Strides strides, int layer, int request, int head, int position) {
  return MASK >= 2 ? layer * strides[0] + request * strides[1] + head * strides[2] + position * strides[3] : 0;
}

// Scores are kept in base 2 (fa_exp2): the bodies fold log2(e) into the scale, and an additive
// mask's values take it here.
constexpr float FA_LOG2_E = 1.4426950408889634f;

// Score s (base 2) of key `key` for such a row, -inf where the key is hidden: at or past `hi`,
// past the row's last key, or masked (MASK 2: false in the boolean mask; 3: -inf in the additive
// one, whose value joins the score otherwise).
template <int MASK, typename MaskPtr, typename Strides>
METAL_FUNC float fa_masked_score(float s, int key, int hi, int last_key, MaskPtr mask, int64_t mask_row,
                                 Strides mask_strides) {
  bool visible = key < hi && key <= last_key;
  if (MASK >= 2) {
    const float m_val = visible ? float(mask[mask_row + int64_t(key) * mask_strides[4]]) : 0.0f;
    if (MASK == 2) {
      visible = visible && m_val != 0.0f;
    } else {
      visible = visible && m_val != -INFINITY;  // NaN and +inf join the score: the row is NaN
      s += m_val * FA_LOG2_E;
    }
  }
  return visible ? s : -INFINITY;
}

// A BITS-bit code c as the float 1 + c / 2^BITS: c becomes the top mantissa bits of 1.0f, so a
// shift and one logic op make it, with neither the int-to-float converter (a quarter-rate unit on
// NVIDIA) nor a subtraction. The kernel folds the offset into the affine map instead:
// scale * c + bias = (scale * 2^BITS) * (1 + c / 2^BITS) + (bias - scale * 2^BITS).
// `one` is 1.0f's bits, read at run time (fa_code_chunk::one): a logic op takes one constant
// inline and one from a register, and a constant the compiler can see would cost each code a
// second op (NVIDIA's ptxas keeps both constants inline when registers are short).
template <int BITS>
METAL_FUNC float fa_code_unit(uint32_t word, int bit, uint32_t one) {
  constexpr int AT = 23 - BITS;  // where the code goes: the top BITS bits of the mantissa
  constexpr uint32_t MASK = ((1u << BITS) - 1u) << AT;
  return as_type<float>((((word >> bit) << AT) & MASK) | one);
}

// The codes of E consecutive elements of an mx.quantize (affine) row, kept packed until used:
// `chunk[e]` is code e as fa_code_unit's float. Element i of a word sits at bit BITS * i (BITS is 2, 4 or 8,
// so no code straddles two words); E is a power of two, so a run never straddles one either.
template <int E, int BITS>
struct fa_code_chunk {
  static constexpr int PER_WORD = 32 / BITS;
  static constexpr int WORDS = (E + PER_WORD - 1) / PER_WORD;
  uint32_t words[WORDS];
  int first_bit;  // of element 0 within words[0]
  uint32_t one;   // 1.0f's bits, from the kernel's inputs (fa_code_unit)
  METAL_FUNC float operator[](int e) const {
    const int bit = first_bit + e * BITS;
    return fa_code_unit<BITS>(words[bit / 32], bit % 32, one);
  }
};

// Element `index` of a key's row at `key_at` (fa_key_offset), elements `step` apart; `narrow`
// (fa_narrow_rows): the whole offset in 32 bits, one multiply-add from the key.
METAL_FUNC int64_t fa_element_offset(bool narrow, int64_t key_at, int index, int64_t step) {
  return narrow ? int64_t(int(key_at) + index) : key_at + index * step;
}

// Fills `out` with run `chunk` of a key's row at `key_at` of `codes` (fa_element_offset); `one` is
// 1.0f's bits as the kernel read them.
template <int E, int BITS, typename CodePtr>
METAL_FUNC void fa_load_codes(CodePtr codes, int64_t key_at, int64_t step, bool narrow, int chunk, uint32_t one,
                              thread fa_code_chunk<E, BITS>& out) {
  constexpr int PER_WORD = fa_code_chunk<E, BITS>::PER_WORD;
  const int first = chunk * E;
  for (int w = 0; w < fa_code_chunk<E, BITS>::WORDS; ++w) {
    out.words[w] = codes[fa_element_offset(narrow, key_at, first / PER_WORD + w, step)];
  }
  out.first_bit = (first % PER_WORD) * BITS;
  out.one = one;
}

// The codes of a word at bits `bit` and `bit + 16` moved to bit AT of the low and the high half
// and masked, with `pair_one` (1.0 in both halves) or-ed in: a pair of 16-bit floats
// 1 + c * 2^AT / 2^MANTISSA. One shift and one logic op; no shift where bit == AT.
template <int BITS, int AT>
METAL_FUNC uint32_t fa_code_pair_at(uint32_t word, int bit, uint32_t pair_one) {
  constexpr uint32_t MASK = (((1u << BITS) - 1u) << AT) * 0x10001u;
  const uint32_t moved = AT >= bit ? word << (AT - bit) : word >> (bit - AT);
  return (moved & MASK) | pair_one;
}

// Two codes of a word as a pair of 16-bit floats 1 + c / 2^BITS, for 16-bit matrix operands
// (fa_frag16): the codes at bits `bit` and `bit + 16` go to the top of the low and the high half's
// mantissa. MANTISSA is the operand type's (10: f16, 7: bf16; BITS <= MANTISSA keeps it exact);
// `pair_one` is its 1.0 in both halves, read at run time as fa_code_unit's `one`. One shift and one
// logic op make two codes, where a 32-bit operand (fa_code_unit) takes them for one.
template <int BITS, int MANTISSA>
METAL_FUNC uint32_t fa_code_pair(uint32_t word, int bit, uint32_t pair_one) {
  constexpr int AT = MANTISSA > BITS ? MANTISSA - BITS : 0;  // (also compiles where never run)
  return fa_code_pair_at<BITS, AT>(word, bit, pair_one);
}

// Byte `byte` of `lo` and of `hi` as the low bytes of a word's low and high half; its other two
// bytes are whatever comes cheapest (callers mask them). One byte permute on NVIDIA.
#ifndef FA_HAVE_BYTES_PAIR
METAL_FUNC uint32_t fa_bytes_pair(uint32_t lo, uint32_t hi, int byte) {
  return ((lo >> (8 * byte)) & 0xFFu) | ((hi >> (8 * byte)) & 0xFFu) << 16;
}
#endif

// Element e of two keys' runs of codes of one dim range, as a pair of 16-bit floats
// 1 + c / 2^MANTISSA: `lo`'s code in the low half, `hi`'s in the high half, a word of a 16-bit V^T
// operand (decode_mma.metal's output with OUT_MANTISSA != 0). The two codes' bytes are gathered
// into one word (fa_bytes_pair); each code then goes to the bottom of its half's mantissa, where a
// byte's lowest code already lies (fa_code_pair_at with AT = 0): one logic op for it, a shift and
// a logic op for the others (fa_code_pair puts every code at the top of the mantissa: a shift
// each). Its affine map is fa_unit_scale<MANTISSA> / fa_unit_bias<MANTISSA>'s.
template <int BITS, int MANTISSA, int E>
METAL_FUNC uint32_t fa_code_pair_keys(thread const fa_code_chunk<E, BITS>& lo, thread const fa_code_chunk<E, BITS>& hi,
                                      int e, uint32_t pair_one) {
  const int bit = lo.first_bit + e * BITS;  // the same in `hi`: both runs are of the same dims
  const uint32_t both = fa_bytes_pair(lo.words[bit / 32], hi.words[bit / 32], bit % 32 / 8);
  return fa_code_pair_at<BITS, 0>(both, bit % 8, pair_one);
}

// The affine map of codes read by fa_code_unit (and fa_code_pair): scale * c + bias
// = fa_unit_scale(scale) * (1 + c / 2^BITS) + fa_unit_bias(scale, bias); fa_code_pair_keys' with
// BITS its operands' MANTISSA.
template <int BITS>
METAL_FUNC float fa_unit_scale(float scale) {
  return scale * float(1 << BITS);
}
template <int BITS>
METAL_FUNC float fa_unit_bias(float scale, float bias) {
  return bias - fa_unit_scale<BITS>(scale);
}

// 8 x 8 float matrices for simdgroup matrix products: Apple's simdgroup_matrix, NVIDIA's mma.sync
// (cuda_compat.h). A lane holds two elements (fa_frag) of each operand. Where they sit depends on
// the platform and, on NVIDIA, on the operand's role, so a kernel places elements only through
// these: fa_frag_row(lane) is the row of both of a lane's elements of an A operand or of an
// accumulator, fa_frag_col_a / fa_frag_col_acc their columns, fa_frag_row_b / fa_frag_col_b a
// B operand's. FA_FRAG_COL_XOR0 / 1 / 2 reach (by xor of the lane) the other lanes that hold a
// lane's accumulator columns (fa_frag_col_max / fa_frag_col_sum).
struct fa_frag {
  float e[2];
};
// 16-bit operands over k = 16 (m16n8k16 on NVIDIA): an 8 x 16 A or a 16 x 8 B operand of type
// T, four elements a lane in two 32-bit words, element e in word e / 2 (low half first). A lane's
// A element e is at row fa_frag_row(lane), column fa_frag16_k_a(lane, e): elements 2w and 2w + 1
// are columns k and k + 1, so a kernel may build a word of an A operand from one load. A B
// element e is at (fa_frag16_k_b(lane, e), fa_frag16_col_b(lane, e)).
struct fa_frag16 {
  uint32_t w[2];
};
// A 16-bit operand's four elements in float, where they are not exact in T (the weights P^T of
// decode_mma.metal's plain output): fa_mma2_16_any_b takes it as B.
struct fa_frag16f {
  float e[4];
};
#ifndef FA_HAVE_MMA
// Apple's layout, as MLX's steel kernels use it: every role holds (row, col) and (row, col + 1).
METAL_FUNC int fa_frag_row(int lane) {
  return (lane / 4 & 4) + lane / 2 % 4;
}
METAL_FUNC int fa_frag_col_a(int lane, int j) {
  return (lane / 4 & 2) * 2 + lane % 2 * 2 + j;
}
METAL_FUNC int fa_frag_col_acc(int lane, int j) {
  return fa_frag_col_a(lane, j);
}
METAL_FUNC int fa_frag_row_b(int lane, int j) {
  return fa_frag_row(lane);
}
METAL_FUNC int fa_frag_col_b(int lane, int j) {
  return fa_frag_col_a(lane, j);
}
// Over k = 16: two of Apple's 8 x 8 products, k = 0..7 and 8..15; word kh of a lane holds its
// two elements of product kh.
METAL_FUNC int fa_frag16_k_a(int lane, int e) {
  return e / 2 * 8 + fa_frag_col_a(lane, e % 2);
}
METAL_FUNC int fa_frag16_k_b(int lane, int e) {
  return e / 2 * 8 + fa_frag_row_b(lane, e % 2);
}
METAL_FUNC int fa_frag16_col_b(int lane, int e) {
  return fa_frag_col_b(lane, e % 2);
}
// Word kh of a 16-bit operand as the float fragment of 8 x 8 product kh.
template <typename T>
METAL_FUNC fa_frag fa_frag16_floats(fa_frag16 x, int kh) {
  fa_frag f;
  for (int j = 0; j < 2; ++j) {
    f.e[j] = float(as_type<T>(ushort(x.w[kh] >> (16 * j))));
  }
  return f;
}
#define FA_FRAG_COL_XOR0 2
#define FA_FRAG_COL_XOR1 4
#define FA_FRAG_COL_XOR2 16

// Two products that share b, in float: d0 = a0 b + c0, d1 = a1 b + c1 (one 16-row tile of a
// tensor core on NVIDIA). Every lane of the simdgroup takes part.
METAL_FUNC void fa_mma2(thread fa_frag& d0, thread fa_frag& d1, fa_frag a0, fa_frag a1, fa_frag b,
                        fa_frag c0, fa_frag c1) {
  simdgroup_matrix<float, 8, 8> ma0, ma1, mb, mc0, mc1, md0, md1;
  for (int j = 0; j < 2; ++j) {
    ma0.thread_elements()[j] = a0.e[j];
    ma1.thread_elements()[j] = a1.e[j];
    mb.thread_elements()[j] = b.e[j];
    mc0.thread_elements()[j] = c0.e[j];
    mc1.thread_elements()[j] = c1.e[j];
  }
  simdgroup_multiply_accumulate(md0, ma0, mb, mc0);
  simdgroup_multiply_accumulate(md1, ma1, mb, mc1);
  for (int j = 0; j < 2; ++j) {
    d0.e[j] = md0.thread_elements()[j];
    d1.e[j] = md1.thread_elements()[j];
  }
}
// The same for a `b` of any float values. fa_mma2 may take its operands in a narrower type
// (NVIDIA: tf32, exact for f16 / bf16 values and small integers); this one keeps float's accuracy.
METAL_FUNC void fa_mma2_any_b(thread fa_frag& d0, thread fa_frag& d1, fa_frag a0, fa_frag a1, fa_frag b,
                              fa_frag c0, fa_frag c1) {
  fa_mma2(d0, d1, a0, a1, b, c0, c1);
}
// The same over k = 16 with 16-bit operands of type T (half or bfloat): here two products in
// float over k = 0..7 and 8..15 (fa_frag16).
template <typename T>
METAL_FUNC void fa_mma2_16(thread fa_frag& d0, thread fa_frag& d1, fa_frag16 a0, fa_frag16 a1, fa_frag16 b,
                           fa_frag c0, fa_frag c1) {
  for (int kh = 0; kh < 2; ++kh) {
    fa_mma2(d0, d1, fa_frag16_floats<T>(a0, kh), fa_frag16_floats<T>(a1, kh), fa_frag16_floats<T>(b, kh),
            kh == 0 ? c0 : d0, kh == 0 ? c1 : d1);
  }
}
// An accumulator's matrix as a B operand: element (r, c) stays (r, c). All lanes take part.
METAL_FUNC fa_frag fa_acc_as_b(fa_frag acc, int lane) {
  return acc;
}
// Two accumulators (rows 0..7 and 8..15 of a 16 x 8 matrix) as one B operand over k = 16 in
// float (fa_frag16f): here in place. All lanes take part.
METAL_FUNC void fa_accs_as_b16(fa_frag p0, fa_frag p1, int lane, thread fa_frag16f& b) {
  b = fa_frag16f{{p0.e[0], p0.e[1], p1.e[0], p1.e[1]}};
}
// fa_mma2_16 for a `b` of any float values (fa_frag16f): here two products in float, as
// fa_mma2_16's (PARTS: how many 16-bit parts of b cuda_compat.h's form takes).
template <typename T, int PARTS = 2>
METAL_FUNC void fa_mma2_16_any_b(thread fa_frag& d0, thread fa_frag& d1, fa_frag16 a0, fa_frag16 a1, fa_frag16f b,
                                 fa_frag c0, fa_frag c1) {
  for (int kh = 0; kh < 2; ++kh) {
    const fa_frag b_kh = fa_frag{{b.e[2 * kh], b.e[2 * kh + 1]}};
    fa_mma2(d0, d1, fa_frag16_floats<T>(a0, kh), fa_frag16_floats<T>(a1, kh), b_kh, kh == 0 ? c0 : d0,
            kh == 0 ? c1 : d1);
  }
}
#endif
// Which of the 4 runs of a 16-bit score tile's dims (fa_qmma_score_dim16) a lane's A words hold.
METAL_FUNC int fa_frag16_k_run(int lane) {
  return fa_frag16_k_a(lane, 0) % 8 / 2;
}
// x combined over the lanes that hold the same accumulator columns as this one (a query row of
// decode_mma.metal): its max, its sum. All lanes take part.
METAL_FUNC float fa_frag_col_max(float x) {
  x = metal::max(x, simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR0)));
  x = metal::max(x, simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR1)));
  return metal::max(x, simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR2)));
}
METAL_FUNC float fa_frag_col_sum(float x) {
  x += simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR0));
  x += simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR1));
  return x + simd_shuffle_xor(x, ushort(FA_FRAG_COL_XOR2));
}

// Dims of decode_mma.metal, permuted within each group of GS: k-index k of score tile
// i (tile i holds 8 dims of group i / (GS / 8)) and column n of output tile i. A lane's elements
// of a group then fill one run of consecutive dims (fa_code_chunk): GS / 4 for the scores (its
// rows k and k + 4 of B on NVIDIA), GS / 8 for the output (its column n).
template <int GS>
METAL_FUNC int fa_qmma_score_dim(int i, int k) {
  constexpr int TILES_PER_GROUP = GS / 8;
  return i / TILES_PER_GROUP * GS + k % 4 * (GS / 4) + i % TILES_PER_GROUP * 2 + k / 4;
}
template <int GS>
METAL_FUNC int fa_qmma_out_dim(int i, int n) {
  constexpr int TILES_PER_GROUP = GS / 8;
  return i / TILES_PER_GROUP * GS + n * TILES_PER_GROUP + i % TILES_PER_GROUP;
}

// The same for 16-bit score operands (decode_mma.metal with SCORE_MANTISSA != 0):
// column k of score tile i, 16 dims of group i / (GS / 16). A lane's columns k and k + 1 (one word
// of its A operand, fa_frag16) take the codes at bits b and b + 16 of one code word
// (fa_code_pair); its columns of a group fill one run of GS / 4 dims (whole words: GS * BITS >= 128).
template <int GS, int BITS>
METAL_FUNC int fa_qmma_score_dim16(int i, int k) {
  constexpr int TILES_PER_GROUP = GS / 16;
  constexpr int PAIRS_PER_WORD = 16 / BITS;
  const int pair = i % TILES_PER_GROUP * 2 + k / 8;  // of the lane's run
  return i / TILES_PER_GROUP * GS + k % 8 / 2 * (GS / 4) + pair / PAIRS_PER_WORD * (32 / BITS) +
         pair % PAIRS_PER_WORD + k % 2 * PAIRS_PER_WORD;
}

// Plain K/V in decode_mma.metal: where a lane's run of RUN = D / RUNS dims lies in the row. Not
// in one stretch: in pieces of a 16-byte vector's elements (fewer if RUN is shorter), RUNS pieces
// apart, so that one vector load by the RUNS lanes of a key reads one stretch of its row (whole
// sectors) instead of RUNS pieces a run apart, each load using half of every sector it touched
// (H200, B = 1: 28 sectors a request, twice the sectors the row holds, L1 hit rate 48%). `d`:
// the dim as fa_qmma_score_dim16 / fa_qmma_out_dim lay runs out (run d / RUN, position d % RUN);
// a bijection of D, applied alike to Q, K and the output. Quantized K/V (PIECED false) keep it.
template <int RUN>
struct fa_piece {  // 16-bit elements of the widest whole vector load of a run
  static constexpr int value = RUN % 8 == 0 ? 8 : RUN % 4 == 0 ? 4 : RUN % 2 == 0 ? 2 : 1;
};
template <int RUNS, int RUN, bool PIECED>
METAL_FUNC int fa_run_dim(int d) {
  constexpr int PIECE = fa_piece<RUN>::value;
  const int run = d / RUN, at = d % RUN;
  return PIECED ? (at / PIECE * RUNS + run) * PIECE + at % PIECE : d;
}

// An input's shape or strides by the axes of the 5-D form (layer, request, head, key, element):
// the caller's arrays reach the kernels as passed, 4-D without the layer axis unless LAYERED. A
// 4-D array's axis a - 1 is axis a here, and its absent layer axis has stride 0 (one layer), read
// from nothing. `a` is a constant at every use, so the choice folds away.
template <bool LAYERED, typename Axes>
struct fa_axes5 {
  Axes axes;
  METAL_FUNC int64_t operator[](int a) const {
    return LAYERED ? int64_t(axes[a]) : a == 0 ? int64_t(0) : int64_t(axes[a - 1]);
  }
};
template <bool LAYERED, typename Axes>
METAL_FUNC fa_axes5<LAYERED, Axes> fa_axes5_of(Axes axes) {
  return fa_axes5<LAYERED, Axes>{axes};
}

// Where a threadgroup of a decode kernel (decode_attention.metal, decode_mma.metal) works, from its
// place in the grid and the run-time dims[] (L, G, block keys, has key ranges):
//   x: key block       keys block * block_keys .. + block_keys - 1 of the S keys
//   y: kv head x tile  tile y % tiles of kv head y / tiles; a tile is ROWS of the kv head's G * L
//                      query rows, row rr query head kv_head * G + rr / L at position rr % L
//   z: n               layer n / B, request n % B (B requests a layer; n also indexes the outputs)
// Made in two steps, each where the bodies derived its values before (fa_grid_position_of at the
// top, fa_request_keys_of after the strides), whose fields the bodies copy into locals at once:
// only so does nvcc 13 build the same code as from the lines written out. One step, fields read
// where they are used, or the key range's branch in a function that returns the whole position
// each moved loads or divisions and changed ptxas' registers.
struct fa_grid_position {
  int L;            // query positions a request
  int G;            // query heads a kv head
  int block_keys;   // keys a block (the last may hold fewer)
  bool has_ranges;  // key_ranges holds each request's range
  int group_rows;   // G * L query rows a kv head
  int block;        // grid x
  int tile;         // grid y % tiles
  int kv_head;      // grid y / tiles
  int n;            // grid z
};
// `group`: threadgroup_position_in_grid.
template <int ROWS, typename Group, typename Dims>
METAL_FUNC fa_grid_position fa_grid_position_of(Group group, Dims dims) {
  fa_grid_position at;
  at.L = dims[0];
  at.G = dims[1];
  at.block_keys = dims[2];
  at.has_ranges = dims[3] != 0;
  at.group_rows = at.G * at.L;
  const int tiles = (at.group_rows + ROWS - 1) / ROWS;
  at.block = int(group.x);
  at.tile = int(group.y) % tiles;
  at.kv_head = int(group.y) / tiles;
  at.n = int(group.z);
  return at;
}

// The threadgroup's request and the keys of its block it reads, lo .. hi - 1: those within the
// request's range of key_ranges (two words a request, fa_key_range_end), or all where the launch
// has none. `q_shape5`, `kv_shape5`: the 5-D shapes (fa_axes5) of the query and of K (its codes).
struct fa_request_keys {
  int S;        // keys of the K/V arrays
  int H_q;      // query heads
  int NB;       // key blocks of S (the partial outputs' axis)
  int layer;
  int request;
  int key_end;  // the request's keys end here (fa_last_key)
  int lo;
  int hi;
};
template <typename Ranges, typename QShape5, typename KVShape5>
METAL_FUNC fa_request_keys fa_request_keys_of(fa_grid_position grid, Ranges key_ranges, QShape5 q_shape5,
                                              KVShape5 kv_shape5) {
  fa_request_keys at;
  const int B = kv_shape5[1];
  at.S = kv_shape5[3];
  at.H_q = q_shape5[2];
  at.NB = (at.S + grid.block_keys - 1) / grid.block_keys;
  at.layer = grid.n / B;
  at.request = grid.n % B;
  int key_begin = 0;
  at.key_end = at.S;
  if (grid.has_ranges) {
    key_begin = key_ranges[2 * at.request];
    at.key_end = fa_key_range_end(key_begin, key_ranges[2 * at.request + 1], at.S);
  }
  at.lo = metal::max(grid.block * grid.block_keys, key_begin);
  at.hi = metal::min(grid.block * grid.block_keys + grid.block_keys, at.key_end);
  return at;
}

// Offsets into an array of quantized K/V (one kv head's rows: keys along axis 3, a key's words or
// groups along axis 4). `narrow`: every offset within the head's rows fits in 32 bits and a key's
// elements are contiguous (fa_narrow_rows), so a key's offset is one 32-bit product and its
// elements are constant offsets from it; otherwise 64-bit products of the array's strides.
// Callers pass a `narrow` the compiler can fold (decode_mma.metal's unrolled passes).
template <typename Strides>
METAL_FUNC int64_t fa_key_offset(bool narrow, Strides strides, int key) {
  return narrow ? int64_t(key * int(strides[3])) : int64_t(key) * strides[3];
}
template <typename Strides>
METAL_FUNC int64_t fa_element_step(bool narrow, Strides strides) {
  return narrow ? 1 : strides[4];
}
// (Products, not a division: a 64-bit division is a subroutine of about 80 instructions on NVIDIA.)
template <typename Strides>
METAL_FUNC bool fa_narrow_rows(Strides strides, int S, int elements) {
  const int64_t key_stride = strides[3] < 0 ? -strides[3] : strides[3];
  return strides[4] == 1 && key_stride >= 0 && key_stride <= 0x7fffffff &&
         key_stride * int64_t(S - 1) + elements <= int64_t(0x7fffffff);
}
template <typename Strides>
METAL_FUNC bool fa_same_strides(Strides a, Strides b) {
  return a[3] == b[3] && a[4] == b[4];
}

// What a lane of decode_mma.metal loads of one 16-key tile of codes, for each half h of it: the
// K codes of its A elements (key h * 8 + its row; K_RUNS runs of a group, fa_qmma_k_run) with that
// key's K and V scales and biases; the V codes of its A elements (32-bit V^T operands: keys
// h * 8 + its columns; 16-bit ones, OUT16: the keys of its word h, fa_frag16_k_a(lane, 2h + j));
// the V scales of its B elements' keys (likewise). Scales and biases stay as loaded (fa_chunk)
// until used: widened to float on arrival, they would hold twice the registers while in flight.
template <int GROUPS, int SCORE_RUN, int OUT_RUN, int BITS, typename ST, int K_RUNS>
struct fa_qmma_tile {
  fa_code_chunk<SCORE_RUN, BITS> k_codes[2][K_RUNS][GROUPS];  // [half][run][group]
  fa_code_chunk<OUT_RUN, BITS> v_codes[2][2][GROUPS];
  fa_chunk<ST, GROUPS> k_scale[2];  // [half][group], of the key of the lane's row
  fa_chunk<ST, GROUPS> k_bias[2];
  fa_chunk<ST, GROUPS> v_bias[2];
  fa_chunk<ST, GROUPS> v_row_scale[2];
  fa_chunk<ST, GROUPS> v_scale[2][2];  // [half][B element][group]
};

// Which of a group's 4 runs of K codes (fa_qmma_score_dim / fa_qmma_score_dim16) a lane's A
// elements read: with 32-bit operands (K_RUNS = 2) element j's; with 16-bit ones (1) all of them.
template <int K_RUNS>
METAL_FUNC int fa_qmma_k_run(int lane, int j) {
  return K_RUNS == 2 ? fa_frag_col_a(lane, j) % 4 : fa_frag16_k_run(lane);
}

// Fills `t` with the tile of keys first .. first + 15; `*_row` point at the kv head's rows, and
// keys past `last` are read as `last`. KEYS: the part the scores and the softmax use (K codes, the
// row key's scales and biases); else the part the output uses (V codes, the B elements' V scales).
// `narrow` (fa_narrow_rows of the codes and of K's scales, the four scale and bias arrays with the
// same strides, each one's rows fa_packed_rows): one key offset serves those four, and a key's
// groups load whole.
template <bool OUT16, bool KEYS, int GROUPS, int SCORE_RUN, int OUT_RUN, int BITS, typename ST, int K_RUNS,
          typename CodePtr, typename ScalePtr, typename Strides>
METAL_FUNC void fa_qmma_load_tile(
    thread fa_qmma_tile<GROUPS, SCORE_RUN, OUT_RUN, BITS, ST, K_RUNS>& t, bool narrow, int first, int last, int lane,
    uint32_t one, CodePtr k_row, Strides k_codes_strides, CodePtr v_row, Strides v_codes_strides,
    ScalePtr ks_row, Strides k_scales_strides, ScalePtr kb_row, Strides k_biases_strides,
    ScalePtr vs_row, Strides v_scales_strides, ScalePtr vb_row, Strides v_biases_strides) {
  constexpr int HALF_KEYS = 8;
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (KEYS) {
      const int row_key = metal::min(first + h * HALF_KEYS + fa_frag_row(lane), last);
      const int64_t ks_at = fa_key_offset(narrow, k_scales_strides, row_key);
      const int64_t kb_at = narrow ? ks_at : fa_key_offset(narrow, k_biases_strides, row_key);
      const int64_t vs_at = narrow ? ks_at : fa_key_offset(narrow, v_scales_strides, row_key);
      const int64_t vb_at = narrow ? ks_at : fa_key_offset(narrow, v_biases_strides, row_key);
      fa_load_chunk<GROUPS>(ks_row + ks_at, fa_element_step(narrow, k_scales_strides), narrow, t.k_scale[h]);
      fa_load_chunk<GROUPS>(kb_row + kb_at, fa_element_step(narrow, k_biases_strides), narrow, t.k_bias[h]);
      fa_load_chunk<GROUPS>(vb_row + vb_at, fa_element_step(narrow, v_biases_strides), narrow, t.v_bias[h]);
      fa_load_chunk<GROUPS>(vs_row + vs_at, fa_element_step(narrow, v_scales_strides), narrow, t.v_row_scale[h]);
      const int64_t k_at = fa_key_offset(narrow, k_codes_strides, row_key);
      #pragma unroll
      for (int j = 0; j < K_RUNS; ++j) {
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          fa_load_codes<SCORE_RUN, BITS>(k_row, k_at, k_codes_strides[4], narrow, g * 4 + fa_qmma_k_run<K_RUNS>(lane, j),
                                         one, t.k_codes[h][j][g]);
        }
      }
    } else {
      #pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col_key = metal::min(first + (OUT16 ? fa_frag16_k_a(lane, 2 * h + j) : h * HALF_KEYS + fa_frag_col_a(lane, j)), last);
        const int b_key = metal::min(first + (OUT16 ? fa_frag16_k_b(lane, 2 * h + j) : h * HALF_KEYS + fa_frag_row_b(lane, j)), last);
        const int64_t v_at = fa_key_offset(narrow, v_codes_strides, col_key);
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          fa_load_codes<OUT_RUN, BITS>(v_row, v_at, v_codes_strides[4], narrow, g * 8 + fa_frag_row(lane), one,
                                       t.v_codes[h][j][g]);
        }
        fa_load_chunk<GROUPS>(vs_row + fa_key_offset(narrow, v_scales_strides, b_key), fa_element_step(narrow, v_scales_strides),
                              narrow, t.v_scale[h][j]);
      }
    }
  }
}

// Staged tiles (decode_mma.metal's STAGES): a simdgroup's copy of one tile in threadgroup memory,
// read back with fa_qmma_load_tile as `narrow` rows. Key r's K codes at codes + r * PITCH, its
// V codes at codes + (16 + r) * PITCH; scales and biases as 4 arrays of 16 rows of
// GROUPS (K scales, K biases, V scales, V biases). Rows sit as in device memory, unpadded: on the
// H200 cp.async fills a stage faster when a source line lands in one piece, and rows padded to
// spread the read-back loads over the banks (pitches of 24 and 20 words) took 2-7% longer at
// 4-bit, B = 32 (commit d205b41: docs/h200/stage-layout/), more than the bank conflicts they avoided cost.
template <int ROW_WORDS>
struct fa_qmma_stage {
  static constexpr int PITCH = ROW_WORDS;  // a staged row's words, K's and V's alike
  static constexpr int CODE_WORDS = 2 * 16 * PITCH;
};
// A staged array's strides as fa_key_offset and fa_element_step read them: rows `key` apart.
struct fa_stage_strides {
  int key;
  METAL_FUNC int64_t operator[](int axis) const {
    return axis == 3 ? key : 1;
  }
};

// Copies the tile of keys first .. first + 15 (past `last` read as `last`) into a stage
// (fa_copy_async: in flight until fa_copy_wait). Rows as `narrow` passes take them, each key's
// codes in 16-byte pieces (ROW_WORDS a multiple of 4; rows aligned: fa_packed_rows<4>). The
// offsets are fa_key_offset's narrow form with the word added in 32 bits too: through
// fa_key_offset's 64-bit result the staged loop took 13 more LEAs a tile (nvcc 13.0).
template <int ROW_WORDS, int GROUPS, typename CodeStage, typename ScaleStage, typename CodePtr, typename ScalePtr,
          typename Strides>
METAL_FUNC void fa_qmma_stage_tile(CodeStage codes, ScaleStage scales, int first, int last, int lane, CodePtr k_row,
                                   Strides k_codes_strides, CodePtr v_row, Strides v_codes_strides, ScalePtr ks_row,
                                   ScalePtr kb_row, ScalePtr vs_row, ScalePtr vb_row, Strides scales_strides) {
  using Stage = fa_qmma_stage<ROW_WORDS>;
  constexpr int PIECES = ROW_WORDS / 4;
  #pragma unroll
  for (int p = lane; p < 16 * PIECES; p += 32) {
    const int r = p / PIECES;
    const int word = 4 * (p % PIECES);
    const int key = metal::min(first + r, last);
    fa_copy_async<4>(codes + r * Stage::PITCH + word, k_row + (key * int(k_codes_strides[3]) + word));
    fa_copy_async<4>(codes + (16 + r) * Stage::PITCH + word,
                     v_row + (key * int(v_codes_strides[3]) + word));
  }
  #pragma unroll
  for (int e = lane; e < 4 * 16; e += 32) {
    const int key = metal::min(first + e % 16, last);
    const int array = e / 16;
    const ScalePtr row = array == 0 ? ks_row : array == 1 ? kb_row : array == 2 ? vs_row : vb_row;
    fa_copy_async<GROUPS>(scales + e * GROUPS, row + key * int(scales_strides[3]));
  }
}

// The first and the last (LAST) element of a key's row asked into L2.
template <int LAST, typename Ptr, typename Strides>
METAL_FUNC void fa_prefetch_row(bool narrow, Ptr rows, Strides strides, int key) {
  const Ptr row = rows + fa_key_offset(narrow, strides, key);
  fa_prefetch(row);
  fa_prefetch(row + fa_element_offset(narrow, 0, LAST, fa_element_step(narrow, strides)));
}

// Asks for the tile of keys first .. first + 15 (past `last` read as `last`) ahead of its loads
// (fa_prefetch), so that they wait on L2, not on device memory: lane l takes key l % 16, the first
// and the last word of its row of K (l < 16) or V codes, and its row of K or V scales and biases.
template <int ROW_WORDS, typename CodePtr, typename ScalePtr, typename Strides>
METAL_FUNC void fa_qmma_prefetch_tile(bool narrow, int first, int last, int lane, CodePtr k_row, Strides k_codes_strides,
                                      CodePtr v_row, Strides v_codes_strides, ScalePtr ks_row, Strides k_scales_strides,
                                      ScalePtr kb_row, Strides k_biases_strides, ScalePtr vs_row, Strides v_scales_strides,
                                      ScalePtr vb_row, Strides v_biases_strides) {
  const int key = metal::min(first + lane % 16, last);
  const bool of_k = lane < 16;
  fa_prefetch_row<ROW_WORDS - 1>(narrow, of_k ? k_row : v_row, of_k ? k_codes_strides : v_codes_strides, key);
  fa_prefetch((of_k ? ks_row : vs_row) + fa_key_offset(narrow, of_k ? k_scales_strides : v_scales_strides, key));
  fa_prefetch((of_k ? kb_row : vb_row) + fa_key_offset(narrow, of_k ? k_biases_strides : v_biases_strides, key));
}

// What a lane of decode_mma.metal loads of one 16-key tile of plain K/V (f16 / bf16, D a multiple
// of 32), for each half h of it: the K elements of its A operand's words (the key h * 8 + its row:
// run fa_frag16_k_run(lane) of the 4 runs of D / 4 dims, fa_qmma_score_dim16<D, 16>), and the V
// elements of its 16-bit V^T operands' word h (keys fa_frag16_k_a(lane, 2h + j), j = 0, 1: run
// fa_frag_row(lane) of the 8 runs of D / 8 dims, fa_qmma_out_dim<D>). Both runs start at a
// multiple of their vector load's size.
template <typename T, int D>
struct fa_pmma_tile {
  fa_chunk<T, D / 4> k[2];     // [half]
  fa_chunk<T, D / 8> v[2][2];  // [half][key of the word]
};
template <typename T, int D, typename Ptr, typename Strides>
METAL_FUNC bool fa_pmma_packed_rows(Ptr row, Strides strides) {
  return fa_packed_rows<D / 4>(row, strides[3], strides[4]) && fa_packed_rows<D / 8>(row, strides[3], strides[4]);
}
// Fills `t` with the tile of keys first .. first + 15, as fa_qmma_load_tile does for codes;
// `packed`: fa_pmma_packed_rows of both arrays.
template <typename T, int D, typename Ptr, typename Strides>
METAL_FUNC void fa_pmma_load_tile(thread fa_pmma_tile<T, D>& t, bool narrow, bool packed, int first, int last,
                                  int lane, Ptr k_row, Strides k_strides, Ptr v_row, Strides v_strides) {
  constexpr int HALF_KEYS = 8;
  constexpr int K_PIECE = fa_piece<D / 4>::value, V_PIECE = fa_piece<D / 8>::value;  // fa_run_dim's pieces
  const int k_run = fa_frag16_k_run(lane);
  const int64_t k_step = fa_element_step(narrow, k_strides);
  const int64_t v_step = fa_element_step(narrow, v_strides);
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row_key = metal::min(first + h * HALF_KEYS + fa_frag_row(lane), last);
    fa_load_chunk<D / 4, K_PIECE, 4 * K_PIECE>(k_row + fa_key_offset(narrow, k_strides, row_key) +
                                                   k_run * K_PIECE * k_step, k_step, packed, t.k[h]);
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col_key = metal::min(first + fa_frag16_k_a(lane, 2 * h + j), last);
      fa_load_chunk<D / 8, V_PIECE, 8 * V_PIECE>(v_row + fa_key_offset(narrow, v_strides, col_key) +
                                                     fa_frag_row(lane) * V_PIECE * v_step, v_step, packed, t.v[h][j]);
    }
  }
}

// Asks for the tile of plain keys first .. first + 15 (past `last` read as `last`) ahead of its
// loads (fa_prefetch), as fa_qmma_prefetch_tile does for codes: lane l takes key l % 16, the first
// and the last element of its row of K (l < 16) or V.
template <int D, typename Ptr, typename Strides>
METAL_FUNC void fa_pmma_prefetch_tile(bool narrow, int first, int last, int lane, Ptr k_row, Strides k_strides,
                                      Ptr v_row, Strides v_strides) {
  const int key = metal::min(first + lane % 16, last);
  const bool of_k = lane < 16;
  fa_prefetch_row<D - 1>(narrow, of_k ? k_row : v_row, of_k ? k_strides : v_strides, key);
}

// Merge COUNT partial online-softmax states (scores in base 2): state i has running max
// m[i * ml_stride], denominator l[i * ml_stride] and unnormalised output o[i * o_stride]. States
// that saw no key have m = -inf and weigh nothing. The order is fixed, so the result never depends
// on scheduling. fa_merge_weights works out a row's merged max and denominator and each state's
// weight once; fa_merge_outputs then merges each element of the row's outputs with them. The
// decode kernels merge their simdgroups' states with these, from threadgroup memory; the key
// blocks' states, in device memory, merge in merge_partials.metal, lanes holding the blocks.
template <int COUNT>
struct fa_merged {
  float w[COUNT];
  float m;
  float l;
};
template <int COUNT, typename PM>
METAL_FUNC fa_merged<COUNT> fa_merge_weights(PM m, PM l, int ml_stride) {
  fa_merged<COUNT> s;
  s.m = -INFINITY;
  #pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    s.m = metal::max(s.m, m[i * ml_stride]);
  }
  s.l = 0.0f;
  #pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    // 0 for a state that saw no key, and for every state of a row that saw none (m = -inf).
    s.w[i] = s.m == -INFINITY ? 0.0f : fa_exp2(m[i * ml_stride] - s.m);
    s.l += s.w[i] * l[i * ml_stride];
  }
  return s;
}
// x * factor, exactly 0 where the factor is 0: a state, or a key's share of an accumulator, whose
// weight underflows to 0 in the merged row is skipped, so NaN or Inf it took from a value of its
// own (weighed there, not here) does not come back as 0 * NaN. Rescales and merges use it.
METAL_FUNC float fa_scaled(float x, float factor) {
  return factor == 0.0f ? 0.0f : x * factor;
}
// Neither NaN nor +-Inf: by the exponent bits, which fast math cannot fold away.
METAL_FUNC bool fa_finite(float x) {
  return (as_type<uint>(x) & 0x7F800000u) != 0x7F800000u;
}
template <int COUNT, typename PO>
METAL_FUNC float fa_merge_outputs(thread const fa_merged<COUNT>& s, PO o, int o_stride) {
  float o_all = 0.0f;
  #pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    o_all += fa_scaled(o[i * o_stride], s.w[i]);
  }
  return o_all;
}

// The attention output of a merged state: unnormalised output over denominator, and 0 for a row
// that saw no key (l = 0). NaN in l (a visible NaN score) stays NaN, never a row of zeros.
METAL_FUNC float fa_normalise(float o, float l) {
  return l != 0.0f ? o / l : 0.0f;
}
