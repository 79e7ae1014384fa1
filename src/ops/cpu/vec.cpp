// Scalar twins of ggml's vector primitives (see vec.h), in its AVX-512 and AVX2 builds' orders,
// and the run-time choice between them and the SIMD versions. Compiled for the baseline ISA without contraction: std::fma is the
// correctly rounded libm call, i.e. exactly what vfmadd computes.
#include "ops/cpu/vec.h"

#include <cmath>
#include <cstdlib>
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


float v_expf_avx2(float x) {
  // ggml_v_expf, __AVX2__ && __FMA__ branch: the same reduction as the AVX-512 one, but the
  // polynomial's last term is a product (not an fma with 1), 2^n is built from z's bits and
  // applied by fma(j, k, k), with the rescaling of s1 / s2 where |n| > 126.
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = fp32_to_bits(z) << 23;
  const float k = fp32_from_bits(e + fp32_to_bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);  // NaN compares false: this path
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = fp32_from_bits(g + 0x7f000000u);
  const float s2 = fp32_from_bits(e - g);
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

// One flavour of ggml's x86 build, for the twins below: W float lanes; the last step of the
// f16 dot's GGML_F32xW_REDUCE; the horizontal sum of one vector (tinyBLAS's hsum, soft_max's
// block sum); ggml_v_expf's branch. avx512: 16 lanes, _mm512_reduce_add_ps for both sums;
// avx2: 8 lanes, two hadds for the dot, movehl / movehdup for the vector sum.
struct Avx512Order {
  static constexpr int kW = 16;
  static float dot_reduce(const float* a) { return reduce_add_16(a); }
  static float vec_sum(const float* a) { return reduce_add_16(a); }
  static float expf(float x) { return v_expf(x); }
};
struct Avx2Order {
  static constexpr int kW = 8;
  static float dot_reduce(const float* a) { return reduce_dot_8(a); }
  static float vec_sum(const float* a) { return hsum_8(a); }
  static float expf(float x) { return v_expf_avx2(x); }
};

// ggml_vec_dot_f16: GGML_F16_STEP = 4 W, 4 accumulators of W lanes reduced (a0 + a2) + (a1 +
// a3), then dot_reduce; the tail beyond n & ~(4W - 1) in double.
template <class O>
float dot_f16(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  constexpr int W = O::kW;
  const int64_t np = n & ~int64_t{4 * W - 1};
  float acc[4][W] = {};
  for (int64_t i = 0; i < np && i < n_valid; i += 4 * W) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < W; ++l) {
        const int64_t e = i + W * c + l;
        if (e >= n_valid) continue;  // a zero product leaves the lane unchanged
        acc[c][l] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[c][l]);
      }
    }
  }
  float s[W];
  for (int l = 0; l < W; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double sum = O::dot_reduce(s);
  for (int64_t e = np; e < n_valid; ++e)
    sum += static_cast<double>(fp16_to_fp32(x[e]) * fp16_to_fp32(y[e]));
  return static_cast<float>(sum);
}

// tinyBLAS<W>: one accumulator of W lanes, vec_sum at the end.
template <class O>
float dot_f16_tinyblas(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  float acc[O::kW] = {};
  for (int64_t e = 0; e < n_valid && e < n; ++e)
    acc[e % O::kW] = std::fma(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[e % O::kW]);
  return O::vec_sum(acc);
}

template <float (*Dot)(const fp16_t*, const fp16_t*, int64_t, int64_t)>
void rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y, int64_t n_valid, int64_t n,
          float* out) {
  for (int64_t r = 0; r < nr; ++r) out[r] = Dot(x + r * ldx, y, n_valid, n);
}

// ggml_vec_soft_max_f32: blocks of W below n & ~(W - 1) with the flavour's expf, each block
// summed in float (vec_sum) and added in double; expf above.
template <class O>
double soft_max(float* y, const float* x, int64_t n_valid, int64_t n, float max) {
  constexpr int W = O::kW;
  const int64_t nw = n & ~int64_t{W - 1};
  double sum = 0.0;
  int64_t i = 0;
  for (; i < nw && i < n_valid; i += W) {
    float v[W] = {};
    for (int l = 0; l < W && i + l < n_valid; ++l) v[l] = y[i + l] = O::expf(x[i + l] - max);
    sum += static_cast<double>(O::vec_sum(v));
  }
  for (i = nw; i < n_valid; ++i) {
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

// ggml_vec_swiglu_f32: silu by the flavour's expf in blocks of W, x / (1 + expf(-x)) on the tail.
template <class O>
void swiglu(float* y, const float* x, const float* g, int64_t n) {
  const int64_t nw = n & ~int64_t{O::kW - 1};
  for (int64_t i = 0; i < nw; ++i) y[i] = x[i] / (1.0f + O::expf(0.0f - x[i])) * g[i];
  for (int64_t i = nw; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

template <class O>
constexpr Kernels twins(const char* name) {
  return {name,
          dot_f16<O>,
          dot_f16_tinyblas<O>,
          rows<dot_f16<O>>,
          rows<dot_f16_tinyblas<O>>,
          soft_max<O>,
          swiglu<O>};
}

const Kernels kScalar = twins<Avx512Order>("scalar");
const Kernels kScalarAvx2 = twins<Avx2Order>("scalar-avx2");

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

namespace {
// HOTCOLD_ISA, the quant layer's switch: "ref" (scalar twins), "avx2" (an AVX2-only host's
// flavour and kernels), else unset.
const std::string& isa_cap() {
  static const std::string cap = std::getenv("HOTCOLD_ISA") ? std::getenv("HOTCOLD_ISA") : "";
  return cap;
}
}  // namespace

Flavour flavour() {
  static const Flavour f =
      isa_cap() != "avx2" && avx512_kernels() ? Flavour::kAvx512 : Flavour::kAvx2;
  return f;
}

const Kernels& flavour_twin() {
  return flavour() == Flavour::kAvx512 ? kScalar : kScalarAvx2;
}

const Kernels& kernels() {
  static const Kernels* const k = [] {
    const Kernels* fast = flavour() == Flavour::kAvx512 ? avx512_kernels() : avx2_kernels();
    return fast && isa_cap() != "ref" ? fast : &flavour_twin();
  }();
  return *k;
}

}  // namespace hc::ops::vec
