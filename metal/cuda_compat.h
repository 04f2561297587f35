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

// Vector loads of a K/V chunk when the address allows (Metal's compiler vectorises the plain
// loop in decode_attention.h by itself).
#define FA_HAVE_LOAD_CHUNK
template <typename Word, int E, typename T>
__device__ __forceinline__ bool fa_load_words(const T* p, float* out) {
  constexpr int WORDS = E * sizeof(T) / sizeof(Word);
  if (WORDS * sizeof(Word) != E * sizeof(T) || reinterpret_cast<uintptr_t>(p) % sizeof(Word)) {
    return false;
  }
  Word raw[WORDS > 0 ? WORDS : 1];
  for (int w = 0; w < WORDS; ++w) raw[w] = reinterpret_cast<const Word*>(p)[w];
  const T* h = reinterpret_cast<const T*>(raw);
  for (int e = 0; e < E; ++e) out[e] = float(h[e]);
  return true;
}
template <int E, typename T>
__device__ __forceinline__ void fa_load_chunk(const T* p, float* out) {
  if (!fa_load_words<uint4, E>(p, out) && !fa_load_words<uint2, E>(p, out)) {
    for (int e = 0; e < E; ++e) out[e] = float(p[e]);
  }
}
