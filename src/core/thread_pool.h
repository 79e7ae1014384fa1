// Persistent worker pool. run(fn) calls fn(ith, nth) once on each of nth threads (the calling
// thread is ith == 0) and returns when all are done. Workers spin briefly before sleeping so
// per-token wake-ups stay cheap. Kernels partition output rows by ith so no two threads write
// the same memory.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <type_traits>
#include <thread>
#include <vector>

namespace hc {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(ith, nth) on every thread. fn is only borrowed for the call: no std::function, so a
  // kernel's capturing lambda costs no heap allocation per job (hundreds per token).
  template <class F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_job({[](void* obj, int ith, int nth) { (*static_cast<Fn*>(obj))(ith, nth); },
             const_cast<void*>(static_cast<const void*>(&fn))});
  }

  // Splits [0, n) into nth contiguous chunks; returns thread ith's [begin, end).
  static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    const int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
  }

 private:
  struct Job {
    void (*call)(void* obj, int ith, int nth);
    void* obj;
  };
  void run_job(Job job);
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  Job job_{nullptr, nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace hc
