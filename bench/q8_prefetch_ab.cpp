// A/B of software-prefetch variants of the Q8_0 decode group kernel (src/ops/cpu/
// repack_avx512.cpp, k32<8, true, false>) streaming a 1 GiB Q8_0 decode layout (4096-wide rows,
// as the 7B shape's) from DRAM on two threads, beside a plain read of the same bytes (the
// ceiling of the host's state at that moment). Variants run interleaved, pass after pass, so a
// drift of the host's bandwidth hits them alike. With the argument `l2`, instead: the kernel's
// compute ceiling, one thread on 8 groups (544 KiB) held in L2, beside a plain read of them.
// Standalone (not built by CMake; needs AVX-512 VNNI):
//
//   g++ -O2 -march=native -pthread bench/q8_prefetch_ab.cpp -o /tmp/q8_ab && /tmp/q8_ab [l2]
// GCC 12 reports its own _mm512 intrinsics' internal "undefined" operands as maybe-uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <vector>

#include "interleaved_ab.h"

namespace {

constexpr int64_t kBlock = 8 * 64;  // 16 rows x 32 int8 weights
constexpr int64_t kScale = 32;      // 16 fp16 scales

inline __m512i bcst4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The kernel's loop: 8 accumulators, one vpdpbusd per 4-byte group, every line prefetched PF
// bytes ahead with hint H (PF = 0: none); SPARSE: one prefetch per block (its first line).
template <int PF, int H, bool SPARSE>
void group(const uint8_t* g, int64_t nb, const int8_t* aq, const float* ad, const int32_t* corr,
           float* out) {
  const uint8_t* sc = g + nb * kBlock;
  __m512 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + b * kBlock;
    const int8_t* a = aq + b * 32;
    if (PF) {
      if (SPARSE) {
        _mm_prefetch(reinterpret_cast<const char*>(q + PF), static_cast<_mm_hint>(H));
      } else {
        for (int c = 0; c < 8; ++c)
          _mm_prefetch(reinterpret_cast<const char*>(q + PF + 64 * c), static_cast<_mm_hint>(H));
        _mm_prefetch(reinterpret_cast<const char*>(sc + b * kScale + PF / 16), static_cast<_mm_hint>(H));
      }
    }
    const __m512 dd = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + b * kScale))),
        _mm512_set1_ps(ad[b]));
    __m512i p[8];
    for (int j = 0; j < 8; ++j) p[j] = _mm512_set1_epi32(corr[b * 8 + j]);
    for (int c = 0; c < 8; ++c)
      p[c] = _mm512_dpbusd_epi32(p[c], _mm512_loadu_si512(q + 64 * c), bcst4(a + 4 * c));
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p[j]), acc[j]);
  }
  __m512 r = acc[0];
  for (int j = 1; j < 8; ++j) r = _mm512_add_ps(r, acc[j]);
  _mm512_storeu_ps(out, r);
}

// A plain read of the group's bytes (four independent sums), no software prefetch.
void read_only(const uint8_t* g, int64_t bytes, float* out) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 256 <= bytes; i += 256) {
    s0 = _mm512_add_epi32(s0, _mm512_loadu_si512(g + i));
    s1 = _mm512_add_epi32(s1, _mm512_loadu_si512(g + i + 64));
    s2 = _mm512_add_epi32(s2, _mm512_loadu_si512(g + i + 128));
    s3 = _mm512_add_epi32(s3, _mm512_loadu_si512(g + i + 192));
  }
  const __m512i s = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
  _mm512_storeu_ps(out, _mm512_cvtepi32_ps(s));
}

// ng groups of 4096-wide rows (as the 7B shape's) and the activation they are multiplied by.
struct Layout {
  static constexpr int64_t nb = 128, gbytes = nb * (kBlock + kScale);
  int64_t ng;
  size_t n = static_cast<size_t>(ng * gbytes);
  uint8_t* buf = ab::weights_buffer(n);
  std::vector<int8_t> aq = std::vector<int8_t>(static_cast<size_t>(nb * 32), 1);
  std::vector<float> ad = std::vector<float>(static_cast<size_t>(nb), 1.0f);
  std::vector<int32_t> corr = std::vector<int32_t>(static_cast<size_t>(nb * 8), -512);
  std::vector<float> out = std::vector<float>(static_cast<size_t>(ng * 16));
  explicit Layout(int64_t groups) : ng(groups) {
    if (buf)
      for (size_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(i * 7 + 3) & 0x3f;
  }
  const uint8_t* group_at(int64_t i) const { return buf + i * gbytes; }
};

}  // namespace

// One thread, the same 8 groups again and again (in L2): GB/s of the plain read and of the
// kernel as it is (8 KiB prefetch).
int in_l2() {
  Layout L(8);
  if (!L.buf) return 1;
  const int64_t reps = 4000;
  for (int v = 0; v < 2; ++v) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r)
      for (int64_t i = 0; i < L.ng; ++i) {
        if (v == 0) read_only(L.group_at(i), L.gbytes, L.out.data() + i * 16);
        else group<8192, _MM_HINT_T1, false>(L.group_at(i), L.nb, L.aq.data(), L.ad.data(),
                                             L.corr.data(), L.out.data() + i * 16);
      }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-28s %.1f GB/s one thread in L2\n", v == 0 ? "plain read" : "kernel (8 KiB, T1)",
                static_cast<double>(L.n) * reps / s / 1e9);
  }
  std::printf("(check: %.0f)\n", static_cast<double>(L.out[5]));
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "l2") == 0) return in_l2();
  Layout L(15360);  // ~1 GiB
  if (!L.buf) return 1;
  const int8_t* a = L.aq.data();
  const float* d = L.ad.data();
  const int32_t* k = L.corr.data();
  const int64_t nb = L.nb, ng = L.ng;
  ab::interleaved({"plain read (ceiling)", "8 KiB ahead, T1 (now)", "no software prefetch",
                   "4 KiB ahead, T1", "16 KiB ahead, T1", "2 KiB ahead, T0",
                   "1 line per block, 8 KiB T1"},
                  /*passes=*/8, /*threads=*/2, static_cast<double>(L.n), [&](int v, int t) {
                    for (int64_t i = t * ng / 2; i < (t + 1) * ng / 2; ++i) {
                      const uint8_t* g = L.group_at(i);
                      float* o = L.out.data() + i * 16;
                      if (v == 0) read_only(g, L.gbytes, o);
                      if (v == 1) group<8192, _MM_HINT_T1, false>(g, nb, a, d, k, o);
                      if (v == 2) group<0, 0, false>(g, nb, a, d, k, o);
                      if (v == 3) group<4096, _MM_HINT_T1, false>(g, nb, a, d, k, o);
                      if (v == 4) group<16384, _MM_HINT_T1, false>(g, nb, a, d, k, o);
                      if (v == 5) group<2048, _MM_HINT_T0, false>(g, nb, a, d, k, o);
                      if (v == 6) group<8192, _MM_HINT_T1, true>(g, nb, a, d, k, o);
                    }
                  });
  std::printf("(check: %.0f)\n", static_cast<double>(L.out[5]));
  return 0;
}
