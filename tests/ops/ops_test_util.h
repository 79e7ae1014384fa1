// Helpers shared by the ops tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace hc::ops_test {

// Every weight type the kernels support.
inline constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                         GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                         GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// n normal(0, scale) floats from a seeded generator.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace hc::ops_test
