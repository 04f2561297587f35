// cuda_compat.h: lets the Metal kernel bodies in this folder compile through
// mx.fast.cuda_kernel (NVRTC). It maps only what those bodies use; anything Metal-only that is
// not here must not be used in a kernel. fusedattend/gpu.py places this before the kernels'
// own header and declares Metal's thread-position variables at the top of each body.
#pragma once

typedef unsigned int uint;
typedef unsigned short ushort;

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

// Metal's bit cast.
template <typename To, typename From>
METAL_FUNC To as_type(From x) {
  To out;
  memcpy(&out, &x, sizeof(To));
  return out;
}

// fa_chunk as 32-bit words (two 16-bit elements each, low half first), filled by uint4 / uint2
// vector loads when every row allows it (Metal's compiler vectorises decode_attention.h's loop).
#define FA_HAVE_CHUNK
template <typename T>
using fa_bits = cuda::std::conditional_t<sizeof(T) == 2, ushort, uint>;
template <typename T, int E>
struct fa_chunk {
  static constexpr int PER_WORD = 4 / sizeof(T);
  uint32_t w[E / PER_WORD];
  METAL_FUNC float operator[](int e) const {
    return float(as_type<T>(fa_bits<T>(w[e / PER_WORD] >> (32 / PER_WORD * (e % PER_WORD)))));
  }
};
template <typename T, int E>
using fa_chunk_word = cuda::std::conditional_t<(E * sizeof(T)) % 16 == 0, uint4, uint2>;
template <int E, typename T>
METAL_FUNC bool fa_packed_rows(const T* row, int64_t key_step, int64_t step) {
  constexpr int ALIGN = sizeof(fa_chunk_word<T, E>);
  return step == 1 && reinterpret_cast<uintptr_t>(row) % ALIGN == 0 && (key_step * sizeof(T)) % ALIGN == 0;
}
template <int E, typename T>
METAL_FUNC void fa_load_chunk(const T* p, int64_t step, bool packed, fa_chunk<T, E>& out) {
  using Word = fa_chunk_word<T, E>;
  constexpr int PER_WORD = fa_chunk<T, E>::PER_WORD;
  if (packed) {
    for (int i = 0; i < E * sizeof(T) / sizeof(Word); ++i) {
      const Word x = reinterpret_cast<const Word*>(p)[i];
      memcpy(&out.w[i * sizeof(Word) / 4], &x, sizeof(Word));
    }
  } else {
    for (int i = 0; i < E / PER_WORD; ++i) {
      out.w[i] = 0;
      for (int h = 0; h < PER_WORD; ++h) {
        out.w[i] |= uint32_t(as_type<fa_bits<T>>(p[(i * PER_WORD + h) * step])) << (32 / PER_WORD * h);
      }
    }
  }
}
