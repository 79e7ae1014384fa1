// Shared by the standalone prefetch A/B harnesses (bench/*_prefetch_ab.cpp): a buffer laid out
// like the model's repacked weights, and variants timed interleaved, pass after pass, so a
// drift of the host's bandwidth hits them alike.
#pragma once
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

namespace ab {

// n bytes of anonymous memory with transparent huge pages asked for, as the model's repacked
// weights; nullptr when the mapping fails.
inline uint8_t* weights_buffer(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, n, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

// Runs every variant `passes` times, interleaved, on `threads` threads: run(v, t) does thread
// t's share of variant v. Prints each variant's GB/s for `bytes` per pass.
template <typename Run>
void interleaved(const std::vector<const char*>& names, int passes, int threads, double bytes,
                 Run run) {
  std::vector<double> seconds(names.size(), 0.0);
  for (int pass = 0; pass < passes; ++pass)
    for (size_t v = 0; v < names.size(); ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back([&, v, t] { run(static_cast<int>(v), t); });
      for (auto& th : pool) th.join();
      seconds[v] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  for (size_t v = 0; v < names.size(); ++v)
    std::printf("%-28s %.1f GB/s\n", names[v], bytes * passes / seconds[v] / 1e9);
}

}  // namespace ab
