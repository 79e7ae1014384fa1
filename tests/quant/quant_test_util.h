// Shared helpers for the quant tests: random rows of valid blocks, misaligned buffers, and the
// error bounds derived from float precision.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace hc::quant::qtest {

constexpr GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                     GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                                     GgmlType::Q5_K, GgmlType::Q6_K};
constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float

inline int64_t block_size(GgmlType t) { return dtype_traits(t).block_size; }

// Natural alignment of a row of t: blocks are only ever guaranteed that much.
inline size_t row_alignment(GgmlType t) {
  return (t == GgmlType::F32 || t == GgmlType::Q8_K) ? 4 : 2;
}

// A byte buffer whose data() is `offset` bytes past a 64-byte boundary, so SIMD code sees
// pointers that are deliberately not vector-aligned.
class Buffer {
 public:
  Buffer(size_t size, size_t offset) : storage_(size + offset + 64) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = static_cast<size_t>((64 - base % 64) % 64) + offset;
  }
  uint8_t* data() { return storage_.data() + start_; }
  const uint8_t* data() const { return storage_.data() + start_; }
  float* floats() { return reinterpret_cast<float*>(data()); }

 private:
  std::vector<uint8_t> storage_;
  size_t start_;
};

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  return x;
}

// Random bytes with every fp16 scale field overwritten by a sane value, so the row holds
// every level pattern a file may hold (Q8_0 weights include -128) and finite scales.
inline void sanitize_scales(GgmlType t, uint8_t* row, int64_t nb, std::mt19937& rng) {
  std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
  auto h = [&](bool positive) {
    const float v = ud(rng);
    return fp32_to_fp16(positive ? std::fabs(v) : v);
  };
  for (int64_t i = 0; i < nb; ++i) {
    switch (t) {
      case GgmlType::Q4_0:
        reinterpret_cast<block_q4_0*>(row)[i].d = h(false);
        break;
      case GgmlType::Q8_0:
        reinterpret_cast<block_q8_0*>(row)[i].d = h(false);
        break;
      case GgmlType::Q5_0:
        reinterpret_cast<block_q5_0*>(row)[i].d = h(false);
        break;
      case GgmlType::Q5_1:
        reinterpret_cast<block_q5_1*>(row)[i].d = h(true);
        reinterpret_cast<block_q5_1*>(row)[i].m = h(false);
        break;
      case GgmlType::Q4_1:
        reinterpret_cast<block_q4_1*>(row)[i].d = h(true);
        reinterpret_cast<block_q4_1*>(row)[i].m = h(false);
        break;
      case GgmlType::Q4_K:
        reinterpret_cast<block_q4_K*>(row)[i].d = h(true);
        reinterpret_cast<block_q4_K*>(row)[i].dmin = h(true);
        break;
      case GgmlType::Q5_K:
        reinterpret_cast<block_q5_K*>(row)[i].d = h(true);
        reinterpret_cast<block_q5_K*>(row)[i].dmin = h(true);
        break;
      case GgmlType::Q6_K:
        reinterpret_cast<block_q6_K*>(row)[i].d = h(false);
        break;
      default:
        break;
    }
  }
}

// n elements of weight type t written to dst (row_bytes(t, n) bytes).
inline void random_weights(GgmlType t, int64_t n, uint8_t* dst, std::mt19937& rng) {
  if (block_size(t) == 1) {  // float types: convert random floats
    const std::vector<float> x = random_floats(n, rng);
    quantize_row_ref(t, x.data(), dst, n);
    return;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t bytes = row_bytes(t, n);
  for (int64_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(byte(rng));
  sanitize_scales(t, dst, n / block_size(t), rng);
}

// Per-element magnitude whose rounding the dot products can suffer: |w| for most types, but
// for types with a min (x = d q + m) each part counts, since the two may nearly cancel.
// Computed by dequantising the row with the min (then the scale) zeroed.
inline std::vector<double> weight_magnitudes(GgmlType t, const uint8_t* w, int64_t n) {
  std::vector<float> full(static_cast<size_t>(n));
  dequantize_row_ref(t, w, full.data(), n);
  std::vector<double> mag(full.begin(), full.end());
  for (double& m : mag) m = std::fabs(m);
  if (t != GgmlType::Q4_1 && t != GgmlType::Q5_1 && t != GgmlType::Q4_K && t != GgmlType::Q5_K)
    return mag;
  std::vector<uint8_t> a(w, w + row_bytes(t, n)), b = a;
  const int64_t nb = n / block_size(t);
  for (int64_t i = 0; i < nb; ++i) {
    if (t == GgmlType::Q4_1) {
      reinterpret_cast<block_q4_1*>(a.data())[i].m = 0;
      reinterpret_cast<block_q4_1*>(b.data())[i].d = 0;
    } else if (t == GgmlType::Q5_1) {
      reinterpret_cast<block_q5_1*>(a.data())[i].m = 0;
      reinterpret_cast<block_q5_1*>(b.data())[i].d = 0;
    } else if (t == GgmlType::Q4_K) {
      reinterpret_cast<block_q4_K*>(a.data())[i].dmin = 0;
      reinterpret_cast<block_q4_K*>(b.data())[i].d = 0;
    } else {
      reinterpret_cast<block_q5_K*>(a.data())[i].dmin = 0;
      reinterpret_cast<block_q5_K*>(b.data())[i].d = 0;
    }
  }
  std::vector<float> pa(static_cast<size_t>(n)), pb(static_cast<size_t>(n));
  dequantize_row_ref(t, a.data(), pa.data(), n);
  dequantize_row_ref(t, b.data(), pb.data(), n);
  for (int64_t i = 0; i < n; ++i) mag[i] = std::fabs(pa[i]) + std::fabs(pb[i]);
  return mag;
}

// M = sum_i mag(w_i) * |a_i|: every rounding in a dot product is relative to a part of M.
inline double dot_magnitude(GgmlType t, const uint8_t* w, const uint8_t* a, int64_t n) {
  const std::vector<double> mag = weight_magnitudes(t, w, n);
  std::vector<float> av(static_cast<size_t>(n));
  dequantize_row_ref(vec_dot_type(t), a, av.data(), n);
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += mag[i] * std::fabs(av[i]);
  return m;
}

// Longest chain of dependent float roundings any of our dot products can take over n
// elements: one step per block in the block types (plus a few per block for the scales and a
// reduction tail), one per 32 elements in the float types (plus reductions and a scalar tail).
inline double rounding_chain(GgmlType t, int64_t n) {
  const int64_t bs = block_size(t);
  return bs == 1 ? static_cast<double>(n) / 32 + 48 : static_cast<double>(n / bs) + 16;
}

// Two results each within chain * u * M of the exact value differ by at most twice that.
inline double dot_tolerance(GgmlType t, const uint8_t* w, const uint8_t* a, int64_t n) {
  return 2 * rounding_chain(t, n) * kU * dot_magnitude(t, w, a, n) + 1e-30;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// The SIMD kernel tables under test; a table is null when this CPU lacks the ISA.
struct IsaCase {
  const char* name;
  const IsaKernels* (*get)();
};
inline const IsaCase kIsas[] = {{"avx2", avx2_kernels}, {"avx512", avx512_kernels}};

}  // namespace hc::quant::qtest
