// Helpers shared by the Google Benchmark executables (hc-kernel-bench, hc-ffn-bench).
#pragma once
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace hc::bench {

inline std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Reports `bytes` per iteration as bytes_per_second and as the "GB/s" counter (1e9 B/s).
inline void report_bytes(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// One persistent pool per thread count, shared by every benchmark of the process.
inline ThreadPool& pool_of(int n_threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[n_threads];
  if (!p) p = std::make_unique<ThreadPool>(n_threads);
  return *p;
}

}  // namespace hc::bench
