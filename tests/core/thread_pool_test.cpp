#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"

namespace hc {

TEST(ThreadPool, EveryThreadRunsOncePerJobAndRowsAreCovered) {
  for (int nt : {1, 2, 3, 4}) {
    ThreadPool pool(nt);
    for (int rep = 0; rep < 200; ++rep) {
      const int64_t n = 1 + rep * 7;
      std::vector<int> hits(n, 0);
      std::vector<int> calls(nt, 0);
      pool.run([&](int ith, int nth) {
        ASSERT_EQ(nth, nt);
        calls[ith]++;
        int64_t b, e;
        ThreadPool::split(n, ith, nth, &b, &e);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int c : calls) ASSERT_EQ(c, 1);
      for (int h : hits) ASSERT_EQ(h, 1);
    }
  }
}

TEST(DType, Fp16RoundTripIsExactForAllHalfValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<fp16_t>(h));
    if (f != f) continue;  // NaN payloads need not round-trip
    EXPECT_EQ(fp32_to_fp16(f), h) << "half bits " << h;
  }
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // rounds to +inf
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 4096), 0x3C00);  // ties to even
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_FLOAT_EQ(bf16_to_fp32(0x4040), 3.0f);
}

TEST(DType, TraitsMatchGgml) {
  EXPECT_EQ(dtype_traits(GgmlType::Q4_K).type_size, 144);
  EXPECT_EQ(dtype_traits(GgmlType::Q6_K).type_size, 210);
  EXPECT_EQ(dtype_traits(GgmlType::Q8_0).type_size, 34);
  EXPECT_EQ(dtype_traits(4u).name, nullptr);  // removed Q4_2 id
  GgmlType t;
  ASSERT_TRUE(dtype_from_name("q5_k", &t));
  EXPECT_EQ(t, GgmlType::Q5_K);
  EXPECT_FALSE(dtype_from_name("q9_9", &t));
}

}  // namespace hc
