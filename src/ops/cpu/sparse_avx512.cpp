// AVX-512 kernels of the sparse down projection (sparse.h): each dequantises 16 weights per
// zmm with exactly the operations of quant::dequantize_row_ref (convert, multiply, add or
// subtract, never fused) and adds h * w into the output with one FMA per lane, so the results
// are bit-identical to the scalar twin.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/sparse_kernels.h"
#include "quant/blocks.h"

namespace hc::ops::sparse_detail {
namespace {

using namespace quant;

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

inline void acc16(float* out, __m512 hv, __m512 w) {
  _mm512_storeu_ps(out, _mm512_fmadd_ps(hv, w, _mm512_loadu_ps(out)));
}

inline float half(fp16_t h) { return _cvtsh_ss(h); }

void fma_row(const float* w, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 o = _mm512_maskz_loadu_ps(m, out + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(hv, _mm512_maskz_loadu_ps(m, w + i), o));
  }
}

void axpy_f32(const uint8_t* b, float h, float* out, int64_t n) {
  fma_row(reinterpret_cast<const float*>(b), h, out, n);
}

void axpy_f16(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const auto* w = reinterpret_cast<const fp16_t*>(b);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i));
    const __m512 o = _mm512_maskz_loadu_ps(m, out + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(hv, wv, o));
  }
}

void axpy_bf16(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const auto* w = reinterpret_cast<const bf16_t*>(b);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w + i)), 16);
    const __m512 o = _mm512_maskz_loadu_ps(m, out + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(hv, _mm512_castsi512_ps(bits), o));
  }
}

inline __m512i bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

void axpy_q8_0(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const auto* x = reinterpret_cast<const block_q8_0*>(b);
  for (int64_t i = 0; i < n / QK8_0; ++i, out += QK8_0) {
    const __m512 d = _mm512_set1_ps(half(x[i].d));
    for (int k = 0; k < 2; ++k) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].qs + 16 * k)));
      acc16(out + 16 * k, hv, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
  }
}

void axpy_q4_0(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const __m512i m4 = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
  const auto* x = reinterpret_cast<const block_q4_0*>(b);
  for (int64_t i = 0; i < n / QK4_0; ++i, out += QK4_0) {
    const __m512 d = _mm512_set1_ps(half(x[i].d));
    const __m512i q = bytes16(x[i].qs);
    const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, m4), eight);
    const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
    acc16(out, hv, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
    acc16(out + 16, hv, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
  }
}

void axpy_q4_1(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const __m512i m4 = _mm512_set1_epi32(0x0F);
  const auto* x = reinterpret_cast<const block_q4_1*>(b);
  for (int64_t i = 0; i < n / QK4_1; ++i, out += QK4_1) {
    const __m512 d = _mm512_set1_ps(half(x[i].d)), m = _mm512_set1_ps(half(x[i].m));
    const __m512i q = bytes16(x[i].qs);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, m4));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
    acc16(out, hv, _mm512_add_ps(_mm512_mul_ps(lo, d), m));
    acc16(out + 16, hv, _mm512_add_ps(_mm512_mul_ps(hi, d), m));
  }
}

void axpy_q4_K(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  const __m512i m4 = _mm512_set1_epi32(0x0F);
  const auto* x = reinterpret_cast<const block_q4_K*>(b);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = half(x[i].d), dmin = half(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < QK_K / 64; ++j, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x[i].scales, &sc1, &m1);
      const __m512 d0 = _mm512_set1_ps(d * sc0), mn0 = _mm512_set1_ps(dmin * m0);
      const __m512 d1 = _mm512_set1_ps(d * sc1), mn1 = _mm512_set1_ps(dmin * m1);
      for (int k = 0; k < 2; ++k, out += 16) {
        const __m512i v = bytes16(q + 16 * k);
        acc16(out, hv, _mm512_sub_ps(_mm512_mul_ps(d0, _mm512_cvtepi32_ps(_mm512_and_si512(v, m4))), mn0));
        acc16(out + 32, hv, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))), mn1));
      }
      out += 32;
    }
  }
}

// ---- Tiles: 256 outputs accumulated in 16 registers over every selected neuron, stored once
// (the axpy kernels above load and store the outputs once per neuron). Per output the same
// fma sequence in the same order, so the same bits. The next rows' tiles are prefetched.

constexpr int kPrefetchAhead = 16;  // neurons, into L2 (4 / 8 / 16 / 32 tried: 16 was best)

template <typename Decode>
void tile_run(const uint8_t* base, int64_t nb1, int64_t off, int64_t tile_bytes,
              const int32_t* idx, int64_t n_idx, const float* h, float* out, Decode decode) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n_idx; ++j) {
    if (j + kPrefetchAhead < n_idx) {
      const char* pf = reinterpret_cast<const char*>(base + idx[j + kPrefetchAhead] * nb1 + off);
      for (int64_t b = 0; b < tile_bytes; b += 64) _mm_prefetch(pf + b, _MM_HINT_T1);
    }
    decode(base + idx[j] * nb1 + off, _mm512_set1_ps(h[j]), acc);
  }
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
}

void tile_f32(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
              const float* h, float* out) {
  tile_run(base, nb1, off, 1024, idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
    const auto* w = reinterpret_cast<const float*>(p);
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) acc[v] = _mm512_fmadd_ps(hv, _mm512_loadu_ps(w + 16 * v), acc[v]);
  });
}

void tile_f16(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
              const float* h, float* out) {
  tile_run(base, nb1, off, 512, idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) {
      const __m512 w = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * v)));
      acc[v] = _mm512_fmadd_ps(hv, w, acc[v]);
    }
  });
}

void tile_bf16(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  tile_run(base, nb1, off, 512, idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) {
      const __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * v)));
      acc[v] = _mm512_fmadd_ps(hv, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), acc[v]);
    }
  });
}

void tile_q8_0(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  tile_run(base, nb1, off, 8 * sizeof(block_q8_0), idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
    const auto* x = reinterpret_cast<const block_q8_0*>(p);
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m512 d = _mm512_set1_ps(half(x[b].d));
#pragma GCC unroll 2
      for (int k = 0; k < 2; ++k) {
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs + 16 * k)));
        acc[2 * b + k] = _mm512_fmadd_ps(hv, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d), acc[2 * b + k]);
      }
    }
  });
}

void tile_q4_0(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  tile_run(base, nb1, off, 8 * sizeof(block_q4_0), idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
    const auto* x = reinterpret_cast<const block_q4_0*>(p);
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m512 d = _mm512_set1_ps(half(x[b].d));
      const __m512i q = bytes16(x[b].qs);
      const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, m4), eight);
      const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
      acc[2 * b] = _mm512_fmadd_ps(hv, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), acc[2 * b]);
      acc[2 * b + 1] = _mm512_fmadd_ps(hv, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), acc[2 * b + 1]);
    }
  });
}

void tile_q4_1(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  tile_run(base, nb1, off, 8 * sizeof(block_q4_1), idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi32(0x0F);
    const auto* x = reinterpret_cast<const block_q4_1*>(p);
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m512 d = _mm512_set1_ps(half(x[b].d)), m = _mm512_set1_ps(half(x[b].m));
      const __m512i q = bytes16(x[b].qs);
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, m4));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
      acc[2 * b] = _mm512_fmadd_ps(hv, _mm512_add_ps(_mm512_mul_ps(lo, d), m), acc[2 * b]);
      acc[2 * b + 1] = _mm512_fmadd_ps(hv, _mm512_add_ps(_mm512_mul_ps(hi, d), m), acc[2 * b + 1]);
    }
  });
}

void tile_q4_K(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  tile_run(base, nb1, off, sizeof(block_q4_K), idx, n_idx, h, out, [](const uint8_t* p, __m512 hv, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi32(0x0F);
    const auto& x = *reinterpret_cast<const block_q4_K*>(p);
    const float d = half(x.d), dmin = half(x.dmin);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x.scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x.scales, &sc1, &m1);
      const __m512 d0 = _mm512_set1_ps(d * sc0), mn0 = _mm512_set1_ps(dmin * m0);
      const __m512 d1 = _mm512_set1_ps(d * sc1), mn1 = _mm512_set1_ps(dmin * m1);
#pragma GCC unroll 2
      for (int k = 0; k < 2; ++k) {
        const __m512i v = bytes16(x.qs + 32 * j + 16 * k);
        const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(d0, _mm512_cvtepi32_ps(_mm512_and_si512(v, m4))), mn0);
        const __m512 hi = _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))), mn1);
        acc[4 * j + k] = _mm512_fmadd_ps(hv, lo, acc[4 * j + k]);
        acc[4 * j + 2 + k] = _mm512_fmadd_ps(hv, hi, acc[4 * j + 2 + k]);
      }
    }
  });
}

Kernels make() {
  Kernels k;
  k.fma_row = fma_row;
  k.axpy[static_cast<uint32_t>(GgmlType::F32)] = axpy_f32;
  k.axpy[static_cast<uint32_t>(GgmlType::F16)] = axpy_f16;
  k.axpy[static_cast<uint32_t>(GgmlType::BF16)] = axpy_bf16;
  k.axpy[static_cast<uint32_t>(GgmlType::Q8_0)] = axpy_q8_0;
  k.axpy[static_cast<uint32_t>(GgmlType::Q4_0)] = axpy_q4_0;
  k.axpy[static_cast<uint32_t>(GgmlType::Q4_1)] = axpy_q4_1;
  k.axpy[static_cast<uint32_t>(GgmlType::Q4_K)] = axpy_q4_K;
  k.tile[static_cast<uint32_t>(GgmlType::F32)] = tile_f32;
  k.tile[static_cast<uint32_t>(GgmlType::F16)] = tile_f16;
  k.tile[static_cast<uint32_t>(GgmlType::BF16)] = tile_bf16;
  k.tile[static_cast<uint32_t>(GgmlType::Q8_0)] = tile_q8_0;
  k.tile[static_cast<uint32_t>(GgmlType::Q4_0)] = tile_q4_0;
  k.tile[static_cast<uint32_t>(GgmlType::Q4_1)] = tile_q4_1;
  k.tile[static_cast<uint32_t>(GgmlType::Q4_K)] = tile_q4_K;
  return k;
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::sparse_detail
