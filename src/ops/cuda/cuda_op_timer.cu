#include "ops/cuda/cuda_op_timer.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

namespace hc::ops::cuda {

std::unique_ptr<OpTimer> OpTimer::from_env() {
  const char* v = std::getenv("HC_CUDA_PROFILE");
  if (!v || !*v || std::string(v) == "0") return nullptr;
  std::unique_ptr<OpTimer> t(new OpTimer());
  if (cudaEventCreate(&t->begin_) != cudaSuccess || cudaEventCreate(&t->end_) != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "HC_CUDA_PROFILE: cudaEventCreate failed; no breakdown\n");
    return nullptr;
  }
  return t;
}

OpTimer::~OpTimer() {
  if (begin_) cudaEventDestroy(begin_);
  if (end_) cudaEventDestroy(end_);
}

void OpTimer::start(cudaStream_t stream) {
  started_ = cudaEventRecord(begin_, stream) == cudaSuccess;
}

void OpTimer::stop(cudaStream_t stream, const char* op) {
  if (!started_) return;
  started_ = false;
  float ms = 0;
  if (cudaEventRecord(end_, stream) != cudaSuccess || cudaEventSynchronize(end_) != cudaSuccess ||
      cudaEventElapsedTime(&ms, begin_, end_) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  Total& t = totals_[op];
  t.ms += ms;
  ++t.n;
}

void OpTimer::report(std::FILE* out) const {
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  uint64_t n = 0;
  for (const auto& r : rows) total += r.second.ms, n += r.second.n;
  std::fprintf(out, "HC_CUDA_PROFILE: %.3f ms in %llu operations (each waited for)\n", total,
               static_cast<unsigned long long>(n));
  for (const auto& [name, t] : rows)
    std::fprintf(out, "  %-20s %9llu calls %11.3f ms %9.2f us/call %6.1f%%\n", name.c_str(),
                 static_cast<unsigned long long>(t.n), t.ms, 1000.0 * t.ms / t.n,
                 total > 0 ? 100.0 * t.ms / total : 0.0);
}

}  // namespace hc::ops::cuda
