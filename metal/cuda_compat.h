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
METAL_FUNC float simd_shuffle_xor(float x, ushort mask) {
  return __shfl_xor_sync(0xffffffffu, x, mask);
}
METAL_FUNC float simd_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}
METAL_FUNC float simd_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}

namespace metal {
METAL_FUNC float exp(float x) { return ::expf(x); }
METAL_FUNC float max(float a, float b) { return fmaxf(a, b); }
METAL_FUNC int max(int a, int b) { return a > b ? a : b; }
METAL_FUNC int min(int a, int b) { return a < b ? a : b; }
}  // namespace metal

// Metal's bit cast.
template <typename To, typename From>
METAL_FUNC To as_type(From x) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs equal sizes");
  To out;
  memcpy(&out, &x, sizeof(To));
  return out;
}

// Vector loads of a K/V chunk (Metal's compiler vectorises the plain loop in decode_attention.h
// by itself): one uint4 or uint2 word per 16 or 8 bytes when every row allows it.
#define FA_HAVE_LOAD_CHUNK
template <int E, typename T>
struct fa_chunk_words {
  static constexpr int BYTES = E * sizeof(T);
  using Word = typename cuda::std::conditional<BYTES % 16 == 0, uint4, uint2>::type;
  static constexpr int COUNT = BYTES / sizeof(Word);
};
template <int E, typename T>
METAL_FUNC bool fa_packed_rows(const T* row, int64_t key_step, int64_t step) {
  constexpr int ALIGN = sizeof(typename fa_chunk_words<E, T>::Word);
  return step == 1 && reinterpret_cast<uintptr_t>(row) % ALIGN == 0 && (key_step * sizeof(T)) % ALIGN == 0;
}
template <int E, typename T>
METAL_FUNC void fa_load_chunk(const T* p, int64_t step, bool packed, float* out) {
  using Words = fa_chunk_words<E, T>;
  if (packed) {
    typename Words::Word raw[Words::COUNT];
    for (int w = 0; w < Words::COUNT; ++w) raw[w] = reinterpret_cast<const typename Words::Word*>(p)[w];
    const T* elements = reinterpret_cast<const T*>(raw);
    for (int e = 0; e < E; ++e) out[e] = float(elements[e]);
  } else {
    for (int e = 0; e < E; ++e) out[e] = float(p[e * step]);
  }
}
