// A callable stored in place: a lambda capturing plain values (a handful of pointers, sizes and
// TensorViews, at most kCapacity bytes) and returning nothing, kept without a heap allocation,
// unlike std::function. What queues operations once per token uses it: the CPU device's queue
// and recordings (ops/cpu/cpu_device.cpp), the segment recorder's held operations
// (model/segment_recorder.h).
#pragma once
#include <cstddef>
#include <new>
#include <type_traits>

namespace hc {

class InlineOp {
 public:
  static constexpr size_t kCapacity = 256;

  template <class F>
  void set(F f) {
    static_assert(sizeof(F) <= kCapacity && alignof(F) <= alignof(std::max_align_t));
    static_assert(std::is_trivially_copyable_v<F> && std::is_trivially_destructible_v<F>,
                  "inline operations capture plain values only");
    ::new (static_cast<void*>(buf_)) F(f);
    run_ = [](const void* p) { (*static_cast<const F*>(p))(); };
  }
  void operator()() const { run_(buf_); }

 private:
  alignas(std::max_align_t) unsigned char buf_[kCapacity];
  void (*run_)(const void*) = nullptr;
};

}  // namespace hc
