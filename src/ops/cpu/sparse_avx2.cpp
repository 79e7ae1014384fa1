// AVX2 kernels of the sparse down projection (sparse.h), for CPUs without AVX-512: the
// decoders of sparse_avx512.cpp at 8 weights per ymm, exactly the operations of
// quant::dequantize_row_ref (convert, multiply, add or subtract, never fused), and one FMA per
// lane for h * w, so the results are bit-identical to the scalar twin (and to the AVX-512
// kernels). AVX2 has 16 ymm registers: a 256-output tile is accumulated as two halves of 128
// outputs (16 registers) over every neuron, each output's sequence unchanged; Q4_K, whose block
// is the whole tile, has no tile (axpy per neuron).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "ops/cpu/sparse_kernels.h"
#include "quant/blocks.h"

namespace hc::ops::sparse_detail {
namespace {

using namespace quant;

inline float half(fp16_t h) { return _cvtsh_ss(h); }

inline __m256i bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// ---- Decoders: Decode(p, sink) calls sink(offset, w) for every 8-weight vector of the unit at
// p (offset in elements from p's first weight).

struct DecF32 {
  static constexpr int kUnit = 8, kBytes = 32;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    sink(0, _mm256_loadu_ps(reinterpret_cast<const float*>(p)));
  }
};

struct DecF16 {
  static constexpr int kUnit = 8, kBytes = 16;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    sink(0, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};

struct DecBF16 {
  static constexpr int kUnit = 8, kBytes = 16;
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    sink(0, _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
  }
};

struct DecQ8_0 {
  static constexpr int kUnit = QK8_0, kBytes = sizeof(block_q8_0);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q8_0*>(p);
    const __m256 d = _mm256_set1_ps(half(x.d));
    for (int k = 0; k < 4; ++k) {
      const __m256i q =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.qs + 8 * k)));
      sink(8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
  }
};

struct DecQ4_0 {
  static constexpr int kUnit = QK4_0, kBytes = sizeof(block_q4_0);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_0*>(p);
    const __m256i m4 = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
    const __m256 d = _mm256_set1_ps(half(x.d));
    for (int k = 0; k < 2; ++k) {
      const __m256i q = bytes8(x.qs + 8 * k);
      sink(8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q, m4), eight)), d));
      sink(16 + 8 * k,
           _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight)), d));
    }
  }
};

struct DecQ4_1 {
  static constexpr int kUnit = QK4_1, kBytes = sizeof(block_q4_1);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_1*>(p);
    const __m256i m4 = _mm256_set1_epi32(0x0F);
    const __m256 d = _mm256_set1_ps(half(x.d)), m = _mm256_set1_ps(half(x.m));
    for (int k = 0; k < 2; ++k) {
      const __m256i q = bytes8(x.qs + 8 * k);
      sink(8 * k, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q, m4)), d), m));
      sink(16 + 8 * k, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4)), d), m));
    }
  }
};

struct DecQ4_K {
  static constexpr int kUnit = QK_K, kBytes = sizeof(block_q4_K);
  template <typename Sink>
  static void decode(const uint8_t* p, Sink&& sink) {
    const auto& x = *reinterpret_cast<const block_q4_K*>(p);
    const __m256i m4 = _mm256_set1_epi32(0x0F);
    const float d = half(x.d), dmin = half(x.dmin);
    for (int j = 0; j < QK_K / 64; ++j) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x.scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x.scales, &sc1, &m1);
      const __m256 d0 = _mm256_set1_ps(d * sc0), mn0 = _mm256_set1_ps(dmin * m0);
      const __m256 d1 = _mm256_set1_ps(d * sc1), mn1 = _mm256_set1_ps(dmin * m1);
      for (int k = 0; k < 4; ++k) {
        const __m256i v = bytes8(x.qs + 32 * j + 8 * k);
        sink(64 * j + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_and_si256(v, m4))), mn0));
        sink(64 * j + 32 + 8 * k,
             _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))), mn1));
      }
    }
  }
};

void fma_row(const float* w, float h, float* out, int64_t n) {
  const __m256 hv = _mm256_set1_ps(h);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(hv, _mm256_loadu_ps(w + i), _mm256_loadu_ps(out + i)));
  for (; i < n; ++i) out[i] = std::fma(h, w[i], out[i]);
}

// out[i] = fma(h, w[i], out[i]) over n weights (whole units; float types may end mid-vector).
template <class Dec>
void axpy(const uint8_t* b, float h, float* out, int64_t n) {
  const __m256 hv = _mm256_set1_ps(h);
  int64_t i = 0;
  for (; i + Dec::kUnit <= n; i += Dec::kUnit, b += Dec::kBytes) {
    Dec::decode(b, [&](int o, __m256 w) {
      _mm256_storeu_ps(out + i + o, _mm256_fmadd_ps(hv, w, _mm256_loadu_ps(out + i + o)));
    });
  }
  if (i < n) {  // float types only: a tail under 8 weights
    const int64_t rest = n - i;
    if constexpr (Dec::kUnit == 8) {
      // The tail's weights, widened as the decoder would (fp16 / bf16 / f32 -> f32 is exact).
      alignas(32) uint8_t tmp[Dec::kBytes] = {};
      for (int64_t k = 0; k < rest * (Dec::kBytes / 8); ++k) tmp[k] = b[k];
      alignas(32) float w[8];
      Dec::decode(tmp, [&](int, __m256 v) { _mm256_store_ps(w, v); });
      for (int64_t k = 0; k < rest; ++k) out[i + k] = std::fma(h, w[k], out[i + k]);
    }
  }
}

// ---- Tiles: kTile = 256 outputs as two halves of 128 in 16 registers over every selected
// neuron. Per output the same fma sequence in the same order as axpy, so the same bits.

constexpr int64_t kHalf = kTile / 2;
constexpr int kPrefetchAhead = 16;  // neurons, into L2 (the AVX-512 tile's distance)

template <class Dec>
void half_tile(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
               const float* h, float* out) {
  static_assert(kHalf % Dec::kUnit == 0);
  constexpr int64_t kHalfBytes = kHalf / Dec::kUnit * Dec::kBytes;
  __m256 acc[16];
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n_idx; ++j) {
    if (j + kPrefetchAhead < n_idx) {
      const char* pf = reinterpret_cast<const char*>(base + idx[j + kPrefetchAhead] * nb1 + off);
      for (int64_t b = 0; b < kHalfBytes; b += 64) _mm_prefetch(pf + b, _MM_HINT_T1);
    }
    const __m256 hv = _mm256_set1_ps(h[j]);
    const uint8_t* p = base + idx[j] * nb1 + off;
#pragma GCC unroll 16
    for (int u = 0; u < kHalf / Dec::kUnit; ++u) {
      Dec::decode(p + u * Dec::kBytes, [&](int o, __m256 w) {
        const int v = (u * Dec::kUnit + o) / 8;
        acc[v] = _mm256_fmadd_ps(hv, w, acc[v]);
      });
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < 16; ++v) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

template <class Dec>
void tile(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx, int64_t n_idx,
          const float* h, float* out) {
  constexpr int64_t kHalfBytes = kHalf / Dec::kUnit * Dec::kBytes;
  half_tile<Dec>(base, nb1, off, idx, n_idx, h, out);
  half_tile<Dec>(base, nb1, off + kHalfBytes, idx, n_idx, h, out + kHalf);
}

template <class Dec>
void add(Kernels& k, GgmlType t) {
  k.axpy[static_cast<uint32_t>(t)] = axpy<Dec>;
  if constexpr (kHalf % Dec::kUnit == 0) k.tile[static_cast<uint32_t>(t)] = tile<Dec>;
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
  add<DecQ4_K>(k, GgmlType::Q4_K);  // no tile: its block is the whole tile
  return k;
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::sparse_detail
