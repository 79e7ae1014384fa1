// AVX-512 group kernel of the F16 decode layout (repack.h): one zmm lane per weight row, each
// column's 16 fp16 weights widened with vcvtph2ps and multiplied by the column's activation
// (broadcast) into one of four accumulators (column k feeds accumulator k % 4). The scalar twin
// (f16_ref in repack.cpp) does the same operations in the same order.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/repack_kernels.h"

namespace hc::ops::repack_detail {

namespace {
// No software prefetch, unlike the quantised kernels (repack_avx512.cpp): this kernel consumes a
// 64-byte line every ~2 cycles, fast enough for the hardware stream prefetchers, and an 8 KiB
// L2 prefetch measured 8-10% slower in an interleaved A/B over a 1 GiB layout on two threads
// (33.0-33.6 vs 35.7-36.9 GB/s, docs/BENCHMARKS.md).
inline __m512 col(const uint8_t* g, int64_t k) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(g + k * kF16Col)));
}
}  // namespace

void f16_group_avx512(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const float* x = a.xf;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= nb; k += 4) {  // 4 columns = two 64-byte lines
    acc0 = _mm512_fmadd_ps(col(g, k), _mm512_set1_ps(x[k]), acc0);
    acc1 = _mm512_fmadd_ps(col(g, k + 1), _mm512_set1_ps(x[k + 1]), acc1);
    acc2 = _mm512_fmadd_ps(col(g, k + 2), _mm512_set1_ps(x[k + 2]), acc2);
    acc3 = _mm512_fmadd_ps(col(g, k + 3), _mm512_set1_ps(x[k + 3]), acc3);
  }
  if (k < nb) acc0 = _mm512_fmadd_ps(col(g, k), _mm512_set1_ps(x[k]), acc0), ++k;
  if (k < nb) acc1 = _mm512_fmadd_ps(col(g, k), _mm512_set1_ps(x[k]), acc1), ++k;
  if (k < nb) acc2 = _mm512_fmadd_ps(col(g, k), _mm512_set1_ps(x[k]), acc2), ++k;
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

}  // namespace hc::ops::repack_detail
