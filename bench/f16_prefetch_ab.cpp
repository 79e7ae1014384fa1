// A/B of software-prefetch variants of the F16 decode group kernel (src/ops/cpu/
// repack_f16_avx512.cpp) streaming a 1 GiB F16 decode layout from DRAM on two threads: the
// measurement behind dropping the kernel's 8 KiB prefetch (docs/BENCHMARKS.md). Variants run
// interleaved, pass after pass, so a drift of the host's bandwidth hits them alike. Standalone
// (not built by CMake; needs AVX-512):
//
//   g++ -O2 -march=native -pthread bench/f16_prefetch_ab.cpp -o /tmp/f16_ab && /tmp/f16_ab
// GCC 12 reports its own _mm512 intrinsics' internal "undefined" operands as maybe-uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "interleaved_ab.h"

namespace {

constexpr int64_t kCol = 32;  // 16 rows x fp16: one column of a group

inline __m512 col(const uint8_t* g, int64_t k) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(g + k * kCol)));
}

// The kernel's loop (four accumulators, column k into k % 4), with every line prefetched
// PF bytes ahead with hint H (PF = 0: no software prefetch, the kernel as it is now).
template <int PF, int H>
void one_group(const uint8_t* g, int64_t nb, const float* x, float* out) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t k = 0; k + 4 <= nb; k += 4) {
    if (PF) {
      _mm_prefetch(reinterpret_cast<const char*>(g + k * kCol + PF), static_cast<_mm_hint>(H));
      _mm_prefetch(reinterpret_cast<const char*>(g + k * kCol + 64 + PF), static_cast<_mm_hint>(H));
    }
    a0 = _mm512_fmadd_ps(col(g, k), _mm512_set1_ps(x[k]), a0);
    a1 = _mm512_fmadd_ps(col(g, k + 1), _mm512_set1_ps(x[k + 1]), a1);
    a2 = _mm512_fmadd_ps(col(g, k + 2), _mm512_set1_ps(x[k + 2]), a2);
    a3 = _mm512_fmadd_ps(col(g, k + 3), _mm512_set1_ps(x[k + 3]), a3);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// Two groups side by side (two streams per thread), no software prefetch.
void two_groups(const uint8_t* g, const uint8_t* h, int64_t nb, const float* x, float* out) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  for (int64_t k = 0; k + 2 <= nb; k += 2) {
    const __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]);
    a0 = _mm512_fmadd_ps(col(g, k), x0, a0);
    b0 = _mm512_fmadd_ps(col(h, k), x0, b0);
    a1 = _mm512_fmadd_ps(col(g, k + 1), x1, a1);
    b1 = _mm512_fmadd_ps(col(h, k + 1), x1, b1);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(a0, a1));
  _mm512_storeu_ps(out + 16, _mm512_add_ps(b0, b1));
}

}  // namespace

int main() {
  const int64_t nb = 4096, gbytes = nb * kCol, ng = 8192;  // 128 KiB groups, 1 GiB
  const size_t n = static_cast<size_t>(ng * gbytes);
  uint8_t* buf = ab::weights_buffer(n);
  if (!buf) return 1;
  for (size_t i = 0; i < n; i += 2) buf[i] = 0x00, buf[i + 1] = 0x3c;  // fp16 1.0
  std::vector<float> x(static_cast<size_t>(nb), 1.0f), out(static_cast<size_t>(ng * 16));
  ab::interleaved({"no software prefetch (now)", "8 KiB ahead, T1 (before)", "2 KiB ahead, T0",
                   "two groups interleaved"},
                  /*passes=*/10, /*threads=*/2, static_cast<double>(n), [&](int v, int t) {
                    for (int64_t i = t * ng / 2; i < (t + 1) * ng / 2; i += v == 3 ? 2 : 1) {
                      const uint8_t* g = buf + i * gbytes;
                      float* o = out.data() + i * 16;
                      if (v == 0) one_group<0, 0>(g, nb, x.data(), o);
                      if (v == 1) one_group<8192, _MM_HINT_T1>(g, nb, x.data(), o);
                      if (v == 2) one_group<2048, _MM_HINT_T0>(g, nb, x.data(), o);
                      if (v == 3) two_groups(g, g + gbytes, nb, x.data(), o);
                    }
                  });
  std::printf("(check: %.0f = 4096)\n", static_cast<double>(out[5]));
  return 0;
}
