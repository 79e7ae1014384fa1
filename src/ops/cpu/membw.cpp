// STREAM-like probe: baseline (SSE2) kernels, the threading and the timing. The AVX2 read
// kernel lives in membw_avx2.cpp (compiled with -mavx2) and is picked at run time.
#include "ops/cpu/membw.h"

#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace hc::ops {

double membw_read_avx2_kernel(const float* a, int64_t n);  // membw_avx2.cpp

namespace {

constexpr int64_t kLine = 16;  // floats per 64-byte cache line

// Thread ith's slice of [0, n), cut at whole cache lines so no two threads share a line.
void slice(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  ThreadPool::split((n + kLine - 1) / kLine, ith, nth, begin, end);
  *begin = std::min(*begin * kLine, n);
  *end = std::min(*end * kLine, n);
}

// Eight accumulators of four lanes: 32 floats (two cache lines) per iteration, and enough
// independent adds in flight to cover the add latency.
double read_sse2(const float* a, int64_t n) {
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm_add_ps(s0, _mm_loadu_ps(a + i));
    s1 = _mm_add_ps(s1, _mm_loadu_ps(a + i + 4));
    s2 = _mm_add_ps(s2, _mm_loadu_ps(a + i + 8));
    s3 = _mm_add_ps(s3, _mm_loadu_ps(a + i + 12));
    s4 = _mm_add_ps(s4, _mm_loadu_ps(a + i + 16));
    s5 = _mm_add_ps(s5, _mm_loadu_ps(a + i + 20));
    s6 = _mm_add_ps(s6, _mm_loadu_ps(a + i + 24));
    s7 = _mm_add_ps(s7, _mm_loadu_ps(a + i + 28));
  }
  const __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)),
                              _mm_add_ps(_mm_add_ps(s4, s5), _mm_add_ps(s6, s7)));
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, s);
  double sum = static_cast<double>(lanes[0]) + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += a[i];
  return sum;
}

// The writing kernels: SSE2 loads and stores (plain loops would be turned into memcpy or
// left scalar at -O2). Tails are scalar.
void copy_slice(float* c, const float* a, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(c + i, _mm_loadu_ps(a + i));
  for (; i < n; ++i) c[i] = a[i];
}

void scale_slice(float* b, const float* c, float s, int64_t n) {
  const __m128 vs = _mm_set1_ps(s);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(b + i, _mm_mul_ps(vs, _mm_loadu_ps(c + i)));
  for (; i < n; ++i) b[i] = s * c[i];
}

void add_slice(float* c, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(c + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  for (; i < n; ++i) c[i] = a[i] + b[i];
}

void triad_slice(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m128 vs = _mm_set1_ps(s);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(a + i, _mm_add_ps(_mm_loadu_ps(b + i), _mm_mul_ps(vs, _mm_loadu_ps(c + i))));
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
}

void fill(float* a, float v, int64_t n, ThreadPool& pool) {
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    slice(n, ith, nth, &b, &e);
    std::fill(a + b, a + e, v);
  });
}

double seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float[], FreeDeleter>;

}  // namespace

const char* membw_kernel_name(MembwKernel k) {
  static const char* const kNames[kMembwKernels] = {"read", "copy", "scale", "add", "triad"};
  return kNames[static_cast<int>(k)];
}

int64_t membw_bytes_per_element(MembwKernel k) {
  static const int64_t kBytes[kMembwKernels] = {4, 8, 8, 12, 12};
  return kBytes[static_cast<int>(k)];
}

MembwReadFn membw_read_sse2() { return &read_sse2; }

MembwReadFn membw_read_avx2() {
  return __builtin_cpu_supports("avx2") ? &membw_read_avx2_kernel : nullptr;
}

MembwReadFn membw_read_best(const char** isa) {
  if (MembwReadFn f = membw_read_avx2()) {
    if (isa) *isa = "avx2";
    return f;
  }
  if (isa) *isa = "sse2";
  return membw_read_sse2();
}

double membw_read(const float* a, int64_t n, ThreadPool& pool, MembwReadFn read_fn) {
  return membw_read_repeat(a, n, 1, pool, read_fn);
}

double membw_read_repeat(const float* a, int64_t n, int passes, ThreadPool& pool,
                         MembwReadFn read_fn) {
  if (!read_fn) read_fn = membw_read_best(nullptr);
  struct alignas(64) Partial {
    double sum = 0;
  };
  std::vector<Partial> partial(pool.size());  // one slot per thread: no shared accumulator
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    slice(n, ith, nth, &b, &e);
    for (int p = 0; p < passes; ++p) partial[ith].sum += read_fn(a + b, e - b);
  });
  double sum = 0;
  for (const Partial& p : partial) sum += p.sum;
  return sum;
}

void membw_copy(float* c, const float* a, int64_t n, ThreadPool& pool) {
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    slice(n, ith, nth, &b, &e);
    copy_slice(c + b, a + b, e - b);
  });
}

void membw_scale(float* b, const float* c, float s, int64_t n, ThreadPool& pool) {
  pool.run([&](int ith, int nth) {
    int64_t lo, hi;
    slice(n, ith, nth, &lo, &hi);
    scale_slice(b + lo, c + lo, s, hi - lo);
  });
}

void membw_add(float* c, const float* a, const float* b, int64_t n, ThreadPool& pool) {
  pool.run([&](int ith, int nth) {
    int64_t lo, hi;
    slice(n, ith, nth, &lo, &hi);
    add_slice(c + lo, a + lo, b + lo, hi - lo);
  });
}

void membw_triad(float* a, const float* b, const float* c, float s, int64_t n, ThreadPool& pool) {
  pool.run([&](int ith, int nth) {
    int64_t lo, hi;
    slice(n, ith, nth, &lo, &hi);
    triad_slice(a + lo, b + lo, c + lo, s, hi - lo);
  });
}

Result<MembwResult> measure_membw(const MembwParams& params, ThreadPool& pool) {
  const int64_t n = params.array_bytes / 4 / kLine * kLine;  // floats per array
  if (n <= 0) return Status::Error("membw: array size must be at least 64 bytes");
  if (params.reps < 1) return Status::Error("membw: expected reps >= 1, got " + std::to_string(params.reps));
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const int n_arrays = params.read_only ? 1 : 3;
  Array arr[3];
  for (int k = 0; k < n_arrays; ++k) {
    arr[k].reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!arr[k])
      return Status::Error("membw: cannot allocate " + std::to_string(n_arrays) + " arrays of " +
                           std::to_string(bytes >> 20) + " MiB");
  }
  float* a = arr[0].get();
  float* b = arr[1].get();
  float* c = arr[2].get();
  // First touch from the thread that will use each slice; STREAM's initial values.
  fill(a, 1.0f, n, pool);
  if (b) fill(b, 2.0f, n, pool);
  if (c) fill(c, 0.0f, n, pool);

  MembwResult r;
  r.n_threads = pool.size();
  r.array_bytes = static_cast<int64_t>(bytes);
  r.reps = params.reps;
  MembwReadFn read_fn = params.read_fn;
  if (read_fn) r.read_isa = read_fn == membw_read_avx2() ? "avx2" : "sse2";
  else read_fn = membw_read_best(&r.read_isa);

  constexpr float kScalar = 3.0f;
  // Each kernel alone is idempotent on these arrays (copy c=a, scale b=3c, add c=a+b, triad
  // a=b+3c), so repeating one kernel never grows the values.
  std::vector<double> times;
  times.reserve(params.reps);
  auto time_kernel = [&](MembwKernel k, auto&& pass) {
    pass();  // warm-up: wakes the pool, fills the TLB
    times.clear();
    for (int rep = 0; rep < params.reps; ++rep) {
      const double t0 = seconds();
      pass();
      times.push_back(seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    const double bytes_per_pass = static_cast<double>(membw_bytes_per_element(k)) * n *
                                  (k == MembwKernel::kRead ? std::max(1, params.read_passes) : 1);
    const int i = static_cast<int>(k);
    r.best_s[i] = times.front();
    r.gbs[i] = bytes_per_pass / times.front() / 1e9;
    r.median_gbs[i] = bytes_per_pass / times[times.size() / 2] / 1e9;
  };
  double checksum = 0;
  const int passes = std::max(1, params.read_passes);
  time_kernel(MembwKernel::kRead,
              [&] { checksum = membw_read_repeat(a, n, passes, pool, read_fn) / passes; });
  r.read_checksum = checksum;  // used, so the reads cannot be optimised away
  if (!params.read_only) {
    time_kernel(MembwKernel::kCopy, [&] { membw_copy(c, a, n, pool); });
    time_kernel(MembwKernel::kScale, [&] { membw_scale(b, c, kScalar, n, pool); });
    time_kernel(MembwKernel::kAdd, [&] { membw_add(c, a, b, n, pool); });
    time_kernel(MembwKernel::kTriad, [&] { membw_triad(a, b, c, kScalar, n, pool); });
  }
  return r;
}

}  // namespace hc::ops
