// Helpers shared by the decode-attention kernels (header of every kernel in this folder).
//
// Written in Metal. On NVIDIA, cuda_compat.h is placed before this file and maps the few
// Metal names used here (address-space qualifiers, METAL_FUNC, simd_* reductions) to CUDA.

#ifndef METAL_FUNC
#define METAL_FUNC inline
#endif

// E consecutive elements of a plain K/V row, widened to float.
#ifndef FA_HAVE_LOAD_CHUNK
template <int E, typename T>
METAL_FUNC void fa_load_chunk(const device T* p, thread float* out) {
  for (int e = 0; e < E; ++e) {
    out[e] = float(p[e]);
  }
}
#endif

// E consecutive elements of an mx.quantize (affine) row: `codes` (a device pointer) points at
// the row's first uint32 word, `chunk` is which run of E elements; element i of a word sits at
// bit BITS * i (BITS is 2, 4 or 8, so no code straddles two words).
template <int E, int BITS, typename CodePtr>
METAL_FUNC void fa_load_quantized_chunk(
    CodePtr codes, int chunk, float scale, float bias, thread float* out) {
  constexpr uint32_t code_mask = (1u << BITS) - 1u;
  for (int e = 0; e < E; ++e) {
    const int bit = (chunk * E + e) * BITS;
    const uint32_t code = (codes[bit / 32] >> (bit % 32)) & code_mask;
    out[e] = float(code) * scale + bias;
  }
}

// Merge `count` partial online-softmax states: state i has running max m[i * ml_stride],
// denominator l[i * ml_stride] and unnormalised output o[i * o_stride]. Returns the merged
// unnormalised output and sets the merged max and denominator. States that saw no key have
// m = -inf and weigh nothing. The order is fixed, so the result never depends on scheduling.
template <typename PM, typename PO>
METAL_FUNC float fa_merge_states(
    PM m, PM l, int ml_stride, PO o, int o_stride, int count,
    thread float& m_out, thread float& l_out) {
  float m_all = -INFINITY;
  for (int i = 0; i < count; ++i) {
    m_all = metal::max(m_all, m[i * ml_stride]);
  }
  float o_all = 0.0f;
  float l_all = 0.0f;
  if (m_all != -INFINITY) {
    for (int i = 0; i < count; ++i) {
      float mi = m[i * ml_stride];
      float w = (mi == -INFINITY) ? 0.0f : metal::exp(mi - m_all);
      o_all += w * o[i * o_stride];
      l_all += w * l[i * ml_stride];
    }
  }
  m_out = m_all;
  l_out = l_all;
  return o_all;
}
