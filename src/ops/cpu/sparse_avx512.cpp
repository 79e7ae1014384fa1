// AVX-512 kernels of the sparse down projection (sparse.h): each dequantises 16 weights per
// zmm with exactly the operations of quant::dequantize_row_ref (convert, multiply, add or
// subtract, never fused) and adds h * w into the output with one FMA per lane, so the results
// are bit-identical to the scalar twin.
//
// One decoder per type walks a unit of weights (a block; 16 floats for float types) and hands
// each 16-weight vector with its offset to a sink. The same decoders feed the per-neuron axpy
// kernels (outputs loaded and stored per neuron) and the register tiles (256 outputs kept in
// 16 zmm over every neuron).
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

inline float half(fp16_t h) { return _cvtsh_ss(h); }

inline __m512i bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// ---- Decoders: Unit = elements per call; Decode(p, sink) calls sink(offset, w) for every
// 16-weight vector of the unit at p (offset in elements from p's first weight).

struct DecF32 {
  static constexpr int kUnit = 16, kBytes = 64;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    sink(0, _mm512_loadu_ps(reinterpret_cast<const float*>(p)));
  }
};

struct DecF16 {
  static constexpr int kUnit = 16, kBytes = 32;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    sink(0, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
};

struct DecBF16 {
  static constexpr int kUnit = 16, kBytes = 32;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    sink(0, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
  }
};

struct DecQ8_0 {
  static constexpr int kUnit = QK8_0, kBytes = sizeof(block_q8_0);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q8_0*>(p);
    const __m512 d = _mm512_set1_ps(half(x.d));
    for (int k = 0; k < 2; ++k) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 16 * k)));
      sink(16 * k, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
  }
};

struct DecQ4_0 {
  static constexpr int kUnit = QK4_0, kBytes = sizeof(block_q4_0);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_0*>(p);
    const __m512i m4 = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
    const __m512 d = _mm512_set1_ps(half(x.d));
    const __m512i q = bytes16(x.qs);
    sink(0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, m4), eight)), d));
    sink(16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight)), d));
  }
};

struct DecQ4_1 {
  static constexpr int kUnit = QK4_1, kBytes = sizeof(block_q4_1);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_1*>(p);
    const __m512i m4 = _mm512_set1_epi32(0x0F);
    const __m512 d = _mm512_set1_ps(half(x.d)), m = _mm512_set1_ps(half(x.m));
    const __m512i q = bytes16(x.qs);
    sink(0, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, m4)), d), m));
    sink(16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), d), m));
  }
};

struct DecQ4_K {
  static constexpr int kUnit = QK_K, kBytes = sizeof(block_q4_K);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_K*>(p);
    const __m512i m4 = _mm512_set1_epi32(0x0F);
    const float d = half(x.d), dmin = half(x.dmin);
    for (int j = 0; j < QK_K / 64; ++j) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x.scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x.scales, &sc1, &m1);
      const __m512 d0 = _mm512_set1_ps(d * sc0), mn0 = _mm512_set1_ps(dmin * m0);
      const __m512 d1 = _mm512_set1_ps(d * sc1), mn1 = _mm512_set1_ps(dmin * m1);
      for (int k = 0; k < 2; ++k) {
        const __m512i v = bytes16(x.qs + 32 * j + 16 * k);
        sink(64 * j + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d0, _mm512_cvtepi32_ps(_mm512_and_si512(v, m4))), mn0));
        sink(64 * j + 32 + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4))), mn1));
      }
    }
  }
};

void fma_row(const float* w, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 o = _mm512_maskz_loadu_ps(m, out + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(hv, _mm512_maskz_loadu_ps(m, w + i), o));
  }
}

// out[i] = fma(h, w[i], out[i]) over n weights (whole units; float types may end mid-vector).
template <class Dec>
void axpy(const uint8_t* b, float h, float* out, int64_t n) {
  const __m512 hv = _mm512_set1_ps(h);
  int64_t i = 0;
  for (; i + Dec::kUnit <= n; i += Dec::kUnit, b += Dec::kBytes) {
    Dec::decode(b, [&](int o, __m512 w) {
      _mm512_storeu_ps(out + i + o, _mm512_fmadd_ps(hv, w, _mm512_loadu_ps(out + i + o)));
    });
  }
  if (i < n) {  // float types only: a tail under 16 weights
    const int64_t rest = n - i;
    if constexpr (Dec::kUnit == 16) {
      // The tail's weights, widened as the decoder would (fp16 / bf16 / f32 -> f32 is exact).
      alignas(64) uint8_t tmp[Dec::kBytes] = {};
      for (int64_t k = 0; k < rest * (Dec::kBytes / 16); ++k) tmp[k] = b[k];
      Dec::decode(tmp, [&](int, __m512 w) {
        const __mmask16 m = tail_mask(rest);
        _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(hv, w, _mm512_maskz_loadu_ps(m, out + i)));
      });
    }
  }
}

// ---- Tiles: kTile = 256 outputs accumulated in 16 registers over every selected neuron,
// stored once. Per output the same fma sequence in the same order as axpy, so the same bits.

constexpr int kPrefetchAhead = 16;  // neurons, into L2 (4 / 8 / 16 / 32 tried: 16 was best)

template <class Dec>
void tile(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
          const float* h, float* out) {
  static_assert(kTile % Dec::kUnit == 0);
  constexpr int64_t kTileBytes = kTile / Dec::kUnit * Dec::kBytes;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n_idx; ++j) {
    if (j + kPrefetchAhead < n_idx) {
      const char* pf = reinterpret_cast<const char*>(base + idx[j + kPrefetchAhead] * nb1 + off);
      for (int64_t b = 0; b < kTileBytes; b += 64) _mm_prefetch(pf + b, _MM_HINT_T1);
    }
    const __m512 hv = _mm512_set1_ps(h[j]);
    const uint8_t* p = base + idx[j] * nb1 + off;
#pragma GCC unroll 16
    for (int u = 0; u < kTile / Dec::kUnit; ++u) {
      Dec::decode(p + u * Dec::kBytes, [&](int o, __m512 w) {
        const int v = (u * Dec::kUnit + o) / 16;
        acc[v] = _mm512_fmadd_ps(hv, w, acc[v]);
      });
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
}

template <class Dec>
void add(Kernels& k, GgmlType t) {
  k.axpy[static_cast<uint32_t>(t)] = axpy<Dec>;
  k.tile[static_cast<uint32_t>(t)] = tile<Dec>;
}

Kernels make() {
  Kernels k;
  k.fma_row = fma_row;
  add<DecF32>(k, GgmlType::F32);
  add<DecF16>(k, GgmlType::F16);
  add<DecBF16>(k, GgmlType::BF16);
  add<DecQ8_0>(k, GgmlType::Q8_0);
  add<DecQ4_0>(k, GgmlType::Q4_0);
  add<DecQ4_1>(k, GgmlType::Q4_1);
  add<DecQ4_K>(k, GgmlType::Q4_K);
  return k;
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::sparse_detail
