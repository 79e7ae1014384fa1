#include "core/thread_pool.h"

#include <immintrin.h>

namespace hc {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_job(Job job) {
  if (n_threads_ == 1) {
    job.call(job.obj, 0, 1);
    return;
  }
  job_ = job;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  job.call(job.obj, 0, n_threads_);
  // Spin briefly (the usual case: the other threads finish within microseconds), then yield
  // so an oversubscribed machine can schedule the workers we are waiting for.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 2000) _mm_pause();
    else std::this_thread::yield();
  }
  job_ = {nullptr, nullptr};
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little first (decode issues a job every few microseconds), then yield the core
    // (other runnable threads may be what we wait for), then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 2000 + 200; ++spin) {
      if (spin < 2000) _mm_pause();
      else std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    job_.call(job_.obj, ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace hc
