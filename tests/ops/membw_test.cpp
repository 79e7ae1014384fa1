// The bandwidth probe's kernels compute what they claim (so the timed passes really read and
// write every element), on small buffers, sizes with tails and 1 and 2 threads; the probe
// itself returns finite positive figures. Speed is never asserted here (bench/ measures it).
#include "ops/cpu/membw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace hc::ops {
namespace {

// Small integers: every partial sum is exact in float, so the sum is known exactly.
std::vector<float> ramp(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) - 2.0f;
  return v;
}

double exact_sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s;
}

TEST(Membw, ReadKernelsSumExactly) {
  for (int64_t n : {0, 1, 5, 31, 32, 63, 64, 65, 1000, 4099, 100003}) {
    const auto a = ramp(n);
    const double want = exact_sum(a);
    EXPECT_EQ(membw_read_sse2()(a.data(), n), want) << "sse2 n=" << n;
    if (MembwReadFn f = membw_read_avx2()) {
      EXPECT_EQ(f(a.data(), n), want) << "avx2 n=" << n;
    }
    // Misaligned start: kernels use unaligned loads.
    if (n > 1) {
      const double want1 = want - a[0];
      EXPECT_EQ(membw_read_sse2()(a.data() + 1, n - 1), want1) << "sse2 +1 n=" << n;
      if (MembwReadFn f = membw_read_avx2()) {
        EXPECT_EQ(f(a.data() + 1, n - 1), want1) << "avx2 +1 n=" << n;
      }
    }
  }
}

TEST(Membw, ThreadedKernelsComputeStreamResults) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 17, 1000, 4099, 100003}) {
      const auto a0 = ramp(n);
      std::vector<float> a = a0, b(n, 2.0f), c(n, -1.0f);
      EXPECT_EQ(membw_read(a.data(), n, pool), exact_sum(a0)) << threads << " threads, n=" << n;
      EXPECT_EQ(membw_read(a.data(), n, pool, membw_read_sse2()), exact_sum(a0));
      // Repeated passes: every slice read `passes` times (the partial sums are exact here).
      EXPECT_EQ(membw_read_repeat(a.data(), n, 3, pool), 3 * exact_sum(a0)) << threads << ", " << n;
      membw_copy(c.data(), a.data(), n, pool);
      EXPECT_EQ(c, a0) << "copy, " << threads << " threads, n=" << n;
      membw_scale(b.data(), c.data(), 3.0f, n, pool);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], 3.0f * a0[i]) << "scale i=" << i;
      membw_add(c.data(), a.data(), b.data(), n, pool);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], 4.0f * a0[i]) << "add i=" << i;
      membw_triad(a.data(), b.data(), c.data(), 3.0f, n, pool);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 15.0f * a0[i]) << "triad i=" << i;
    }
  }
}

TEST(Membw, ProbeReportsFinitePositiveBandwidth) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    MembwParams p;
    p.array_bytes = 1 << 20;  // small: this checks the plumbing, not the machine
    p.reps = 2;
    auto r = measure_membw(p, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->n_threads, threads);
    EXPECT_EQ(r->array_bytes, 1 << 20);
    EXPECT_EQ(r->read_checksum, (1 << 20) / 4);  // the array holds 1.0f
    for (int k = 0; k < kMembwKernels; ++k) {
      EXPECT_TRUE(std::isfinite(r->gbs[k])) << membw_kernel_name(static_cast<MembwKernel>(k));
      EXPECT_GT(r->gbs[k], 0.0) << membw_kernel_name(static_cast<MembwKernel>(k));
      EXPECT_GT(r->median_gbs[k], 0.0);
      EXPECT_LE(r->median_gbs[k], r->gbs[k]);  // the best pass is at least the median one
    }
    p.read_only = true;
    p.read_fn = membw_read_sse2();
    r = measure_membw(p, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_STREQ(r->read_isa, "sse2");
    EXPECT_GT(r->gbs_of(MembwKernel::kRead), 0.0);
    EXPECT_EQ(r->gbs_of(MembwKernel::kTriad), 0.0);  // not run
    // Several reads per timed pass: the checksum is still one read's, the time covers all.
    p.array_bytes = 16 << 10;
    p.read_passes = 8;
    r = measure_membw(p, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->read_checksum, (16 << 10) / 4);
    EXPECT_GT(r->gbs_of(MembwKernel::kRead), 0.0);
    // best_s is one timed pass of 8 reads: GB/s = 8 reads x 16 KiB / best_s.
    EXPECT_NEAR(r->gbs_of(MembwKernel::kRead) * r->best_s[0], 8.0 * (16 << 10) / 1e9, 1e-12);
  }
}

TEST(Membw, BadParamsAreErrors) {
  ThreadPool pool(1);
  MembwParams p;
  p.array_bytes = 16;
  EXPECT_FALSE(measure_membw(p, pool).ok());
  p.array_bytes = 1 << 16;
  p.reps = 0;
  EXPECT_FALSE(measure_membw(p, pool).ok());
}

TEST(Membw, KernelNamesAndByteCounts) {
  EXPECT_STREQ(membw_kernel_name(MembwKernel::kRead), "read");
  EXPECT_STREQ(membw_kernel_name(MembwKernel::kTriad), "triad");
  EXPECT_EQ(membw_bytes_per_element(MembwKernel::kRead), 4);
  EXPECT_EQ(membw_bytes_per_element(MembwKernel::kCopy), 8);
  EXPECT_EQ(membw_bytes_per_element(MembwKernel::kTriad), 12);
}

}  // namespace
}  // namespace hc::ops
