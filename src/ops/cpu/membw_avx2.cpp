// The AVX2 read kernel of the bandwidth probe (membw.h): eight 8-lane accumulators, four cache
// lines per iteration. Compiled with -mavx2; membw.cpp only calls it when the CPU has AVX2.
#include <immintrin.h>

#include <cstdint>

namespace hc::ops {

double membw_read_avx2_kernel(const float* a, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
    s4 = _mm256_add_ps(s4, _mm256_loadu_ps(a + i + 32));
    s5 = _mm256_add_ps(s5, _mm256_loadu_ps(a + i + 40));
    s6 = _mm256_add_ps(s6, _mm256_loadu_ps(a + i + 48));
    s7 = _mm256_add_ps(s7, _mm256_loadu_ps(a + i + 56));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                                 _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  double sum = 0;
  for (float v : lanes) sum += v;
  for (; i < n; ++i) sum += a[i];
  return sum;
}

}  // namespace hc::ops
