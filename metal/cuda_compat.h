// cuda_compat.h: lets the Metal kernel bodies in this folder compile through
// mx.fast.cuda_kernel (NVRTC). It maps only what those bodies use; anything Metal-only that is
// not here must not be used in a kernel. fusedattend/gpu.py places this before the kernels'
// own header and declares Metal's thread-position variables at the top of each body.
#pragma once

// Occupancy: gpu.py may define FA_LAUNCH_BOUNDS as (threads, threadgroups an SM) before this
// header. MLX writes the kernel's `__global__` line itself, so the bounds ride on that keyword.
#ifdef FA_LAUNCH_BOUNDS
#undef __global__
#define __global__ __location__(global) __launch_bounds__(FA_LAUNCH_BOUNDS)
#endif

typedef unsigned int uint; typedef unsigned short ushort;

// Address spaces: CUDA has one generic space for pointers; threadgroup arrays are __shared__.
// `device` and `constant` cannot be macros here (CUDA spells __device__ and __constant__ through
// them), so the kernels' helpers take pointers as template parameters instead of naming them.
#define thread
#define threadgroup __shared__
#define threadgroup_barrier(flags) __syncthreads()
#define METAL_FUNC __device__ __forceinline__

#ifndef INFINITY
#define INFINITY (cuda::std::numeric_limits<float>::infinity())
#endif

// simdgroup = warp of 32 lanes; every call site keeps the whole warp converged.
METAL_FUNC float simd_shuffle_xor(float x, ushort mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }
METAL_FUNC float simd_shuffle(float x, ushort lane) { return __shfl_sync(0xffffffffu, x, lane); }
METAL_FUNC bool simd_any(bool x) { return __any_sync(0xffffffffu, x); }
METAL_FUNC uint simd_or(uint x) { return __reduce_or_sync(0xffffffffu, x); }

namespace metal {
METAL_FUNC float max(float a, float b) { return fmaxf(a, b); }
METAL_FUNC int max(int a, int b) { return a > b ? a : b; }
METAL_FUNC int min(int a, int b) { return a < b ? a : b; }
}  // namespace metal

// fa_exp2 (decode_attention.h): ex2.approx already returns exactly 0 at -inf.
#define FA_HAVE_EXP2
METAL_FUNC float fa_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A kv head's row pointer held whole in registers: otherwise the compiler adds the row's 64-bit
// offset into every key's address (5 instructions a key; 1 from the pointer). Loads stay global.
#define FA_HAVE_PIN
template <typename P> METAL_FUNC P fa_pin(P p) { asm("" : "+l"(p)); __builtin_assume(__isGlobal(p)); return p; }

// The 128-byte line holding *p asked into L2 ahead of its loads (fa_qmma_prefetch_tile): a hint
// that holds no register and that no instruction waits on.
#define FA_HAVE_PREFETCH
template <typename P> METAL_FUNC void fa_prefetch(P p) { asm volatile("prefetch.global.L2 [%0];" : : "l"(p)); }

// fa_copy_async as cp.async of 4, 8 or 16 bytes (16 bypass L1): in flight, it holds no register.
// fa_copy_wait: cp.async.wait_group, then the warp's barrier (simdgroup_barrier's).
#define FA_HAVE_COPY_ASYNC
#define simdgroup_barrier(flags) __syncwarp()
template <int N, typename T> METAL_FUNC void fa_copy_async(T* dst, const T* src) {
#define FA_CP_ASYNC(level) asm volatile("cp.async." level ".shared.global [%0], [%1], %2;" \
    : : "r"(unsigned(__cvta_generic_to_shared(dst))), "l"(src), "n"(int(N * sizeof(T))) : "memory")
  if (N * sizeof(T) == 16) FA_CP_ASYNC("cg"); else FA_CP_ASYNC("ca");
#undef FA_CP_ASYNC
}
METAL_FUNC void fa_copy_commit() { asm volatile("cp.async.commit_group;" : : : "memory"); }
template <int PENDING> METAL_FUNC void fa_copy_wait() {
  asm volatile("cp.async.wait_group %0;" : : "n"(PENDING) : "memory");
  __syncwarp();
}

// Metal's bit cast.
template <typename To, typename From>
METAL_FUNC To as_type(From x) {
  To out;
  memcpy(&out, &x, sizeof(To));
  return out;
}

// fa_chunk as 32-bit words (two 16-bit elements each, low half first), filled by vector loads
// (fa_chunk_word) when every row allows it (Metal's compiler vectorises decode_attention.h's loop).
#define FA_HAVE_CHUNK
template <typename T>
using fa_bits = cuda::std::conditional_t<sizeof(T) == 2, ushort, uint>;
template <typename T, int E>
struct fa_chunk {
  static constexpr int PER_WORD = 4 / sizeof(T);
  uint32_t w[(E + PER_WORD - 1) / PER_WORD];
  METAL_FUNC float operator[](int e) const {
    return float(as_type<T>(fa_bits<T>(w[e / PER_WORD] >> (32 / PER_WORD * (e % PER_WORD)))));
  }
};
template <typename T, int E>  // (16-bit T only: a word holds elements 2r and 2r + 1)
METAL_FUNC uint32_t fa_chunk_pair(const fa_chunk<T, E>& c, int r) { return c.w[r]; }
template <typename T, int E>  // (16-bit T only: element e of each, one byte permute)
METAL_FUNC uint32_t fa_chunks_word(const fa_chunk<T, E>& lo, const fa_chunk<T, E>& hi, int e) {
  return __byte_perm(lo.w[e / 2], hi.w[e / 2], e % 2 ? 0x7632 : 0x5410);
}
#define FA_HAVE_BYTES_PAIR  // one byte permute (its bytes 1 and 3 are lo's byte 0: the callers mask them)
METAL_FUNC uint32_t fa_bytes_pair(uint32_t lo, uint32_t hi, int byte) { return __byte_perm(lo, hi, byte | (4 + byte) << 8); }
template <typename T, int E, int BYTES = E * sizeof(T)>  // the widest load BYTES are a whole number of
using fa_chunk_word = cuda::std::conditional_t<BYTES % 16 == 0, uint4, cuda::std::conditional_t<BYTES % 8 == 0, uint2,
    cuda::std::conditional_t<BYTES % 4 == 0, uint, ushort>>>;  // (uint, ushort: a few groups' scales)
template <int E, typename T>
METAL_FUNC bool fa_packed_rows(const T* row, int64_t key_step, int64_t step) {
  constexpr int ALIGN = sizeof(fa_chunk_word<T, E>);
  return step == 1 && reinterpret_cast<uintptr_t>(row) % ALIGN == 0 && (key_step * sizeof(T)) % ALIGN == 0;
}
template <int E, int PIECE = E, int GAP = PIECE, typename T>  // (pieces: decode_attention.h's)
METAL_FUNC void fa_load_chunk(const T* p, int64_t step, bool packed, fa_chunk<T, E>& out) {
  using Word = fa_chunk_word<T, PIECE>;
  constexpr int PER_WORD = fa_chunk<T, E>::PER_WORD, WORD_ELEMENTS = sizeof(Word) / sizeof(T);
  if (packed) {
    for (int i = 0; i < E / WORD_ELEMENTS; ++i) {
      const int e = i * WORD_ELEMENTS;
      const Word x = *reinterpret_cast<const Word*>(p + e / PIECE * GAP + e % PIECE);
      memcpy(reinterpret_cast<char*>(out.w) + i * sizeof(Word), &x, sizeof(Word));
    }
  } else {
    for (int i = 0; i < (E + PER_WORD - 1) / PER_WORD; ++i) {
      out.w[i] = 0;
      for (int h = 0; h < PER_WORD && i * PER_WORD + h < E; ++h) {
        const int e = i * PER_WORD + h;
        out.w[i] |= uint32_t(as_type<fa_bits<T>>(p[(e / PIECE * GAP + e % PIECE) * step])) << (32 / PER_WORD * h);
      }
    }
  }
}

// decode_attention.h's simdgroup matrix products as mma.sync m16n8k8 in tf32 (10 mantissa bits: exact for
// f16 / bf16 values and small integers; fa_mma2_any_b: `b` as two tf32 parts, within 2^-21 of float's). a0 / c0
// rows 0..7, a1 / c1 8..15; lane (g, t) = (lane / 4, lane % 4) holds A (g, t + 4j), B (t + 4j, g), acc (g, 2t + j).
#define FA_HAVE_MMA
#define FA_FRAG_COL_XOR0 4
#define FA_FRAG_COL_XOR1 8
#define FA_FRAG_COL_XOR2 16
METAL_FUNC int fa_frag_row(int lane) { return lane >> 2; }
METAL_FUNC int fa_frag_col_a(int lane, int j) { return (lane & 3) + 4 * j; }
METAL_FUNC int fa_frag_col_acc(int lane, int j) { return 2 * (lane & 3) + j; }
METAL_FUNC int fa_frag_row_b(int lane, int j) { return (lane & 3) + 4 * j; }
METAL_FUNC int fa_frag_col_b(int lane, int j) { return lane >> 2; }
template <typename F>
METAL_FUNC void fa_mma2(F& d0, F& d1, F a0, F a1, F b, F c0, F c1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};" : "=f"(d0.e[0]), "=f"(d0.e[1]), "=f"(d1.e[0]), "=f"(d1.e[1])
      : "r"(__float_as_uint(a0.e[0])), "r"(__float_as_uint(a1.e[0])), "r"(__float_as_uint(a0.e[1])),
        "r"(__float_as_uint(a1.e[1])), "r"(__float_as_uint(b.e[0])), "r"(__float_as_uint(b.e[1])),
        "f"(c0.e[0]), "f"(c0.e[1]), "f"(c1.e[0]), "f"(c1.e[1]));
}
template <typename F>
METAL_FUNC void fa_mma2_any_b(F& d0, F& d1, F a0, F a1, F b, F c0, F c1) {
  F hi, lo;
  for (int j = 0; j < 2; ++j) {
    uint bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(b.e[j]));
    hi.e[j] = __uint_as_float(bits);
    lo.e[j] = b.e[j] - hi.e[j];
  }
  fa_mma2(d0, d1, a0, a1, lo, c0, c1);
  fa_mma2(d0, d1, a0, a1, hi, d0, d1);
}
// fa_mma2_16 as mma.sync m16n8k16 in f16 or bf16: lane (g, t) holds A (g, 2t + 8w + h) and
// B (2t + 8w + h, g) in half h of word w; a0's words are the A registers 0 and 2, a1's 1 and 3.
METAL_FUNC int fa_frag16_k_a(int lane, int e) { return 2 * (lane & 3) + 8 * (e / 2) + e % 2; }
METAL_FUNC int fa_frag16_k_b(int lane, int e) { return fa_frag16_k_a(lane, e); }
METAL_FUNC int fa_frag16_col_b(int lane, int e) { return lane >> 2; }
template <typename T, typename F, typename F16>
METAL_FUNC void fa_mma2_16(F& d0, F& d1, F16 a0, F16 a1, F16 b, F c0, F c1) {
#define FA_MMA16(type) asm("mma.sync.aligned.m16n8k16.row.col.f32." type "." type ".f32 {%0,%1,%2,%3}, " \
    "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};" : "=f"(d0.e[0]), "=f"(d0.e[1]), "=f"(d1.e[0]), "=f"(d1.e[1]) \
    : "r"(a0.w[0]), "r"(a1.w[0]), "r"(a0.w[1]), "r"(a1.w[1]), "r"(b.w[0]), "r"(b.w[1]), \
      "f"(c0.e[0]), "f"(c0.e[1]), "f"(c1.e[0]), "f"(c1.e[1]))
  if (cuda::std::is_same<T, __half>::value) {
    FA_MMA16("f16");
  } else {
    FA_MMA16("bf16");
  }
#undef FA_MMA16
}
// Element g % 2 of accumulator `acc` in lane `from` (lane = (g, t)): a B element of fa_acc_as_b(16).
template <typename F>
METAL_FUNC float fa_acc_from(F acc, int from, int lane) {
  const float e0 = __shfl_sync(0xffffffffu, acc.e[0], from), e1 = __shfl_sync(0xffffffffu, acc.e[1], from);
  return (lane >> 2) & 1 ? e1 : e0;
}
// B element j, (t + 4j, g), is accumulator element g % 2 of lane 4 (t + 4j) + g / 2.
template <typename F>
METAL_FUNC F fa_acc_as_b(F acc, int lane) {
  F b;
  for (int j = 0; j < 2; ++j) {
    b.e[j] = fa_acc_from(acc, 4 * ((lane & 3) + 4 * j) + (lane >> 3), lane);
  }
  return b;
}
// Two accumulators (rows 0..7 and 8..15) as one B operand over k = 16 in float (fa_frag16f):
// B element e, (2t + 8 (e / 2) + e % 2, g), is element g % 2 of lane 4 (2t + e % 2) + g / 2 of
// accumulator e / 2.
template <typename F, typename B>
METAL_FUNC void fa_accs_as_b16(F p0, F p1, int lane, B& b) {
  for (int e = 0; e < 4; ++e) {
    b.e[e] = fa_acc_from(e < 2 ? p0 : p1, 4 * (2 * (lane & 3) + e % 2) + (lane >> 3), lane);
  }
}
// fa_mma2_16 for a `b` of any float values (fa_frag16f) as PARTS parts in T, smallest first: two
// rounded (16 of float's 24 bits in bf16, 22 in f16), or (T bf16 only) all 24 as three top halves of
// what is left: exact, and fewer instructions than rounding.
template <typename T, int PARTS = 2, typename F, typename F16, typename B>
METAL_FUNC void fa_mma2_16_any_b(F& d0, F& d1, F16 a0, F16 a1, B b, F c0, F c1) {
  F16 part[PARTS] = {};
  for (int e = 0; e < 4; ++e) {
    for (int k = 0; k < PARTS; ++k) {
      const uint32_t top = PARTS == 3 ? as_type<uint32_t>(b.e[e]) & 0xFFFF0000u : 0u;
      const T x = T(b.e[e]);
      b.e[e] -= PARTS == 3 ? as_type<float>(top) : float(x);
      part[k].w[e / 2] |= PARTS == 3 ? (e % 2 ? top : top >> 16) : uint32_t(as_type<ushort>(x)) << (16 * (e % 2));
    }
  }
  for (int k = PARTS - 1; k >= 0; --k) {
    fa_mma2_16<T>(d0, d1, a0, a1, part[k], k == PARTS - 1 ? c0 : d0, k == PARTS - 1 ? c1 : d1);
  }
}
