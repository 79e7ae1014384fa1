// Scalar twins of ggml's vector primitives (see vec.h), in its AVX-512 and AVX2 builds' orders,
// and the run-time choice between them and the SIMD versions. Compiled for the baseline ISA without contraction: std::fma is the
// correctly rounded libm call, i.e. exactly what vfmadd computes.
#include "ops/cpu/vec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hc::ops::vec {

float reduce_add_16(const float* a) {
  // avx512fintrin.h: 512 -> 256 (hi + lo), 256 -> 128 (hi + lo), then lanes (0 + 2, 1 + 3),
  // then their sum.
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = a[i + 8] + a[i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i + 4] + t8[i];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

float v_expf(float x) {
  // ggml_v_expf (vec.h, __AVX512F__ branch), adapted from ARM's optimized routines: 2^n * p(b)
  // with n = round(x / ln 2) and b the reduced argument. fnmadd(a, b, c) = fma(-a, b, c).
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::isnan(n)) return n;
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));  // _mm512_scalef_ps: one rounding, also subnormal
}


namespace {
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

float v_expf_avx2(float x) {
  // ggml_v_expf, __AVX2__ && __FMA__ branch: the same reduction as the AVX-512 one, but the
  // polynomial's last term is a product (not an fma with 1), 2^n is built from z's bits and
  // applied by fma(j, k, k), with the rescaling of s1 / s2 where |n| > 126.
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  const float k = from_bits(e + bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);  // NaN compares false: this path
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from_bits(g + 0x7f000000u);
  const float s2 = from_bits(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

float hsum_8(const float* a) {
  // (hi 128 + lo 128), then lanes (0 + 2, 1 + 3) by movehl, then their sum by movehdup.
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = a[i + 4] + a[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

float reduce_dot_8(const float* a) {
  // GGML_F32x8_REDUCE's last step: (lo 128 + hi 128), then two hadds: (0 + 1) + (2 + 3).
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = a[i] + a[i + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

namespace {

float dot_f16(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np && i < n_valid; i += 64) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 16; ++l) {
        const int64_t e = i + 16 * c + l;
        if (e >= n_valid) continue;  // a zero product leaves the lane unchanged
        acc[c][l] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[c][l]);
      }
    }
  }
  float s[16];
  for (int l = 0; l < 16; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double sum = reduce_add_16(s);
  for (int64_t e = np; e < n_valid; ++e)
    sum += static_cast<double>(fp16_to_fp32(x[e]) * fp16_to_fp32(y[e]));
  return static_cast<float>(sum);
}

float dot_f16_tinyblas(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  float acc[16] = {};
  for (int64_t e = 0; e < n_valid && e < n; ++e)
    acc[e % 16] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[e % 16]);
  return reduce_add_16(acc);
}

void dot_f16_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y, int64_t n_valid,
                  int64_t n, float* out) {
  for (int64_t r = 0; r < nr; ++r) out[r] = dot_f16(x + r * ldx, y, n_valid, n);
}

void dot_f16_tinyblas_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                           int64_t n_valid, int64_t n, float* out) {
  for (int64_t r = 0; r < nr; ++r) out[r] = dot_f16_tinyblas(x + r * ldx, y, n_valid, n);
}

double soft_max(float* y, const float* x, int64_t n_valid, int64_t n, float max) {
  const int64_t n16 = n & ~int64_t{15};
  double sum = 0.0;
  int64_t i = 0;
  for (; i < n16 && i < n_valid; i += 16) {
    float v[16] = {};
    for (int l = 0; l < 16 && i + l < n_valid; ++l) v[l] = y[i + l] = v_expf(x[i + l] - max);
    sum += static_cast<double>(reduce_add_16(v));
  }
  for (i = n16; i < n_valid; ++i) {
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; ++i) y[i] = x[i] / (1.0f + v_expf(0.0f - x[i])) * g[i];
  for (int64_t i = n16; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}


// ---- Twins of ggml's AVX2 build (8 lanes): what llama.cpp runs on an x86 CPU without AVX-512.

float dot_f16_avx2(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  // GGML_F16_STEP 32, EPR 8: 4 accumulators of 8 lanes, GGML_F32x8_REDUCE, the tail in double.
  const int64_t np = n & ~int64_t{31};
  float acc[4][8] = {};
  for (int64_t i = 0; i < np && i < n_valid; i += 32) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 8; ++l) {
        const int64_t e = i + 8 * c + l;
        if (e >= n_valid) continue;  // a zero product leaves the lane unchanged
        acc[c][l] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[c][l]);
      }
    }
  }
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double sum = reduce_dot_8(s);
  for (int64_t e = np; e < n_valid; ++e)
    sum += static_cast<double>(fp16_to_fp32(x[e]) * fp16_to_fp32(y[e]));
  return static_cast<float>(sum);
}

float dot_f16_tinyblas_avx2(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  float acc[8] = {};  // tinyBLAS<8, __m256>: one accumulator, hsum at the end
  for (int64_t e = 0; e < n_valid && e < n; ++e)
    acc[e % 8] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[e % 8]);
  return hsum_8(acc);
}

void dot_f16_rows_avx2(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                       int64_t n_valid, int64_t n, float* out) {
  for (int64_t r = 0; r < nr; ++r) out[r] = dot_f16_avx2(x + r * ldx, y, n_valid, n);
}

void dot_f16_tinyblas_rows_avx2(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                                int64_t n_valid, int64_t n, float* out) {
  for (int64_t r = 0; r < nr; ++r) out[r] = dot_f16_tinyblas_avx2(x + r * ldx, y, n_valid, n);
}

double soft_max_avx2(float* y, const float* x, int64_t n_valid, int64_t n, float max) {
  const int64_t n8 = n & ~int64_t{7};
  double sum = 0.0;
  int64_t i = 0;
  for (; i < n8 && i < n_valid; i += 8) {
    float v[8] = {};
    for (int l = 0; l < 8 && i + l < n_valid; ++l) v[l] = y[i + l] = v_expf_avx2(x[i + l] - max);
    sum += static_cast<double>(hsum_8(v));
  }
  for (i = n8; i < n_valid; ++i) {
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

void swiglu_avx2(float* y, const float* x, const float* g, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; ++i) y[i] = x[i] / (1.0f + v_expf_avx2(0.0f - x[i])) * g[i];
  for (int64_t i = n8; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

const Kernels kScalar = {"scalar", dot_f16, dot_f16_tinyblas, dot_f16_rows, dot_f16_tinyblas_rows,
                         soft_max, swiglu};
const Kernels kScalarAvx2 = {"scalar-avx2", dot_f16_avx2, dot_f16_tinyblas_avx2,
                             dot_f16_rows_avx2, dot_f16_tinyblas_rows_avx2, soft_max_avx2,
                             swiglu_avx2};

}  // namespace

// Defined in vec_avx512.cpp / vec_avx2.cpp; reach them only through avx512_kernels() /
// avx2_kernels(), which check the CPU.
extern const Kernels kAvx512VecKernels;
extern const Kernels kAvx2VecKernels;

const Kernels& scalar_kernels() { return kScalar; }
const Kernels& scalar_avx2_kernels() { return kScalarAvx2; }

const Kernels* avx512_kernels() {
  const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return ok ? &kAvx512VecKernels : nullptr;
}

const Kernels* avx2_kernels() {
  const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c");
  return ok ? &kAvx2VecKernels : nullptr;
}

Flavour flavour() {
  static const Flavour f = [] {
    const char* cap = std::getenv("HOTCOLD_ISA");  // same switch as the quant layer
    if (cap && std::string(cap) == "avx2") return Flavour::kAvx2;
    return avx512_kernels() ? Flavour::kAvx512 : Flavour::kAvx2;
  }();
  return f;
}

const Kernels& flavour_twin() {
  return flavour() == Flavour::kAvx512 ? kScalar : kScalarAvx2;
}

const Kernels& kernels() {
  static const Kernels* const k = [] {
    const char* cap = std::getenv("HOTCOLD_ISA");
    const bool ref = cap && std::string(cap) == "ref";
    if (flavour() == Flavour::kAvx512) return ref ? &kScalar : avx512_kernels();
    const Kernels* fast = ref ? nullptr : avx2_kernels();
    return fast ? fast : &kScalarAvx2;
  }();
  return *k;
}

}  // namespace hc::ops::vec
