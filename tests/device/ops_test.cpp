// The row-wise and element-wise operations and attention of every device against the CPU
// references of ops/cpu (rmsnorm, rope_cache + rope_apply / rope_apply_neox, attention_one,
// swiglu / reglu), with odd sizes and token counts, plus the queued host <-> device copies.
// (The mixture-of-experts row operations: moe_ops_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "device_test_util.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/ops.h"

namespace hc::device_test {
namespace {

class DeviceOps : public DeviceTest {};

TEST_F(DeviceOps, RmsnormMatchesHost) {
  for (int64_t n : {1, 7, 255, 4096, 5000}) {
    for (int64_t n_tok : {1, 3, 17}) {
      const auto x = randn(static_cast<size_t>(n_tok * n), 11 + n, 2.0f);
      const auto w = randn(static_cast<size_t>(n), 12);
      auto dx = to_device(dev, x);
      auto dw = to_device(dev, w);
      DeviceBuffer out(dev, static_cast<uint64_t>(n_tok * n) * 4);
      dev->rmsnorm(out.as<float>(), dx->as<float>(), dw->as<float>(), n_tok, n, 1e-5f);
      dev->rmsnorm(dx->as<float>(), dx->as<float>(), dw->as<float>(), n_tok, n, 1e-5f);  // aliased
      sync();
      const auto got = from_device<float>(dev, out.as<void>(), x.size());
      const auto got_inplace = from_device<float>(dev, dx->as<void>(), x.size());
      std::vector<float> ref(static_cast<size_t>(n));
      for (int64_t t = 0; t < n_tok; ++t) {
        ops::rmsnorm(ref.data(), x.data() + t * n, w.data(), n, 1e-5f);
        for (int64_t i = 0; i < n; ++i) {
          // The mean of squares is an fp32 sum (on a GPU a chain of at most ~35 roundings for
          // these n: n / 256 per thread, then the warp and block trees), halved by the square
          // root, plus a few roundings on either side: 32 u relative.
          const double tol = 32 * kU * std::fabs(ref[i]) + 1e-30;
          ASSERT_NEAR(got[t * n + i], ref[i], tol) << "n " << n << " t " << t << " i " << i;
          ASSERT_EQ(got[t * n + i], got_inplace[t * n + i]);
        }
      }
    }
  }
}

// RoPE on [n_tok, n_head * head_dim] against rope_cache + rope_apply (or, neox,
// rope_apply_neox) per head. The CPU device runs those very functions: bit for bit there.
void check_rope(ops::Device* dev, int64_t n_tok, int n_head, int head_dim, int n_rot, int pos0,
                bool factors, bool neox = false) {
  const float theta_scale = std::pow(10000.0f, -2.0f / n_rot), freq_scale = 0.75f;
  const auto x = randn(static_cast<size_t>(n_tok * n_head * head_dim), 21 + pos0);
  std::vector<float> ff(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + 0.5f * static_cast<float>(i % 5);
  auto dx = to_device(dev, x);
  auto dff = to_device(dev, ff);
  dev->rope(dx->as<float>(), n_tok, n_head, head_dim, n_rot, pos0, theta_scale, freq_scale,
            factors ? dff->as<float>() : nullptr, neox);
  check(dev->sync(), "rope");
  const auto got = from_device<float>(dev, dx->as<void>(), x.size());
  std::vector<float> cs(static_cast<size_t>(n_rot)), ref = x;
  for (int64_t t = 0; t < n_tok; ++t) {
    ops::rope_cache(cs.data(), n_rot, theta_scale, freq_scale, factors ? ff.data() : nullptr,
                    pos0 + t);
    for (int h = 0; h < n_head; ++h) {
      float* r = ref.data() + (t * n_head + h) * head_dim;
      (neox ? ops::rope_apply_neox : ops::rope_apply)(r, n_rot, cs.data());
      const float* g = got.data() + (t * n_head + h) * head_dim;
      for (int i = 0; i < head_dim; ++i) {
        // Same angle bit for bit (same float recurrence); a GPU's sincos is within 2 ulp and
        // glibc's within 1, an ulp being at most 2 u relative: 6 u of each term, plus the
        // roundings of the rotation, doubled: 16 u of the pair's magnitude. The pair of i:
        // (p, p + 1) with p = i & ~1, or NeoX (p, p + n_rot/2) with p = i mod n_rot/2.
        const int half = n_rot / 2;
        const int p = neox ? (half > 0 ? i % half : 0) : i & ~1;
        const int q = neox ? p + half : p + 1;
        const double mag = i < n_rot ? std::fabs(r[p]) + std::fabs(r[q]) : 0.0;
        const double tol = dev->kind() == ops::DeviceKind::kCpu ? 0.0 : 16 * kU * mag;
        ASSERT_NEAR(g[i], r[i], tol) << "t " << t << " head " << h << " i " << i << " n_rot "
                                     << n_rot << " pos0 " << pos0 << " neox " << neox;
      }
    }
  }
}

TEST_F(DeviceOps, RopeMatchesHost) {
  check_rope(dev, 1, 4, 64, 64, 0, false);
  check_rope(dev, 3, 8, 128, 128, 1000, false);
  check_rope(dev, 17, 2, 128, 64, 5, true);  // partial rotation: dims >= n_rot untouched
  check_rope(dev, 5, 3, 80, 80, 30000, true);
}

// NeoX mode (qwen, falcon): pairs half the rotated dimensions apart, the same angles.
TEST_F(DeviceOps, RopeNeoxMatchesHost) {
  check_rope(dev, 1, 4, 64, 64, 0, false, true);
  check_rope(dev, 3, 8, 128, 128, 1000, false, true);
  check_rope(dev, 17, 2, 128, 64, 5, true, true);  // partial rotation: dims >= n_rot untouched
  check_rope(dev, 5, 3, 80, 80, 30000, true, true);
  check_rope(dev, 2, 14, 64, 64, 7, false, true);   // qwen2-0.5b's 14 heads of 64
  check_rope(dev, 1, 3, 96, 32, 123, false, true);  // 16 pairs: half a workgroup
}

TEST_F(DeviceOps, KvStoreRoundsToNearestEvenAtItsPositions) {
  const int n_ctx = 50;
  const int64_t kv_dim = 96, n_tok = 7;
  const auto k = randn(static_cast<size_t>(n_tok * kv_dim), 31);
  const auto v = randn(static_cast<size_t>(n_tok * kv_dim), 32);
  const std::vector<fp16_t> sentinel(static_cast<size_t>(n_ctx * kv_dim), 0x7e00);
  auto dk = to_device(dev, k);
  auto dv = to_device(dev, v);
  for (int pos0 : {0, 40, 43}) {  // the first rows, inside, the last rows of the cache
    auto kc = to_device(dev, sentinel);
    auto vc = to_device(dev, sentinel);
    dev->kv_store(dk->as<float>(), dv->as<float>(), n_tok, pos0, kv_dim, n_ctx, kc->as<fp16_t>(),
                  vc->as<fp16_t>());
    sync();
    const auto kg = from_device<fp16_t>(dev, kc->as<void>(), sentinel.size());
    const auto vg = from_device<fp16_t>(dev, vc->as<void>(), sentinel.size());
    for (int64_t p = 0; p < n_ctx; ++p) {
      for (int64_t d = 0; d < kv_dim; ++d) {
        const int64_t t = p - pos0;
        const bool stored = t >= 0 && t < n_tok;
        ASSERT_EQ(kg[p * kv_dim + d], stored ? fp32_to_fp16(k[t * kv_dim + d]) : 0x7e00)
            << "pos0 " << pos0 << " p " << p << " d " << d;
        ASSERT_EQ(vg[d * n_ctx + p], stored ? fp32_to_fp16(v[t * kv_dim + d]) : 0x7e00)
            << "pos0 " << pos0 << " p " << p << " d " << d;
      }
    }
  }
}

struct AttnCase {
  int n_head, n_head_kv, head_dim, pos0;
  int64_t n_tok;
};

void check_attention(ops::Device* dev, const AttnCase& c, uint32_t seed) {
  const int n_ctx = c.pos0 + static_cast<int>(c.n_tok) + 5;
  const int64_t kv_dim = int64_t{c.n_head_kv} * c.head_dim, q_dim = int64_t{c.n_head} * c.head_dim;
  const ops::AttentionShape sh{c.n_head, c.n_head_kv, c.head_dim, kv_dim, n_ctx};
  const auto kf = randn(static_cast<size_t>(n_ctx * kv_dim), seed);
  const auto vf = randn(static_cast<size_t>(n_ctx * kv_dim), seed + 1);
  const auto q = randn(static_cast<size_t>(c.n_tok * q_dim), seed + 2);
  std::vector<fp16_t> k(kf.size()), v_t(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) k[i] = fp32_to_fp16(kf[i]);
  for (int64_t j = 0; j < n_ctx; ++j) {
    for (int64_t d = 0; d < kv_dim; ++d) v_t[d * n_ctx + j] = fp32_to_fp16(vf[j * kv_dim + d]);
  }
  auto dk = to_device(dev, k);
  auto dv = to_device(dev, v_t);
  auto dq = to_device(dev, q);
  DeviceBuffer out(dev, static_cast<uint64_t>(c.n_tok * q_dim) * 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  dev->attention(dq->as<float>(), dk->as<fp16_t>(), dv->as<fp16_t>(), c.pos0, c.n_tok, sh, scale,
                 out.as<float>());
  check(dev->sync(), "attention");
  const auto got = from_device<float>(dev, out.as<void>(), static_cast<size_t>(c.n_tok * q_dim));
  for (int64_t t = 0; t < c.n_tok; ++t) {
    const int64_t n_kv = c.pos0 + t + 1, n_pad = ops::attention_kv_pad(n_kv);
    std::vector<float> ref(static_cast<size_t>(q_dim)), scratch(static_cast<size_t>(2 * n_pad));
    ops::attention_one(q.data() + t * q_dim, k.data(), v_t.data(), n_kv, n_pad, sh, scale,
                       ops::AttentionKernels{}, 0, c.n_head, ref.data(), scratch.data());
    for (int h = 0; h < c.n_head; ++h) {
      // attention_one rounds the softmax weights to fp16 (ggml); a device may keep them fp32
      // (the GPUs, and the host's batched path): the outputs then differ by at most
      // 2^-11 sum_j p_j |v_j| <= 2^-11 max |v|.
      const int hk = h / (c.n_head / c.n_head_kv);
      float vmax = 0;
      for (int64_t j = 0; j < n_kv; ++j) {
        for (int d = 0; d < c.head_dim; ++d) {
          vmax = std::max(vmax, std::fabs(fp16_to_fp32(v_t[(hk * c.head_dim + d) * n_ctx + j])));
        }
      }
      for (int d = 0; d < c.head_dim; ++d) {
        const int64_t i = t * q_dim + h * c.head_dim + d;
        ASSERT_NEAR(got[i], ref[h * c.head_dim + d], 2 * kU16 * vmax + 1e-5)
            << "heads " << c.n_head << "/" << c.n_head_kv << " head_dim " << c.head_dim << " pos0 "
            << c.pos0 << " t " << t << " h " << h << " d " << d;
      }
    }
  }
}

TEST_F(DeviceOps, AttentionMatchesHostGroupedQueryCausal) {
  const AttnCase cases[] = {
      {8, 2, 64, 0, 1},    {8, 2, 64, 5, 3},   {4, 4, 128, 0, 17},   {8, 1, 80, 300, 3},
      {6, 3, 256, 127, 2}, {2, 2, 512, 40, 1}, {16, 4, 128, 200, 40}, {5, 5, 17, 9, 4},
      {4, 2, 64, 0, 9},    {4, 1, 64, 33, 12},
  };
  uint32_t seed = 40;
  for (const AttnCase& c : cases) check_attention(dev, c, seed += 3);
}

TEST_F(DeviceOps, GluMatchesHost) {
  for (int64_t n : {1, 33, 1000}) {
    for (int64_t n_tok : {1, 3}) {
      const auto g = randn(static_cast<size_t>(n_tok * n), 51, 3.0f);
      const auto u = randn(static_cast<size_t>(n_tok * n), 52);
      for (ops::GluKind kind : {ops::GluKind::kSilu, ops::GluKind::kRelu, ops::GluKind::kDRelu}) {
        auto dg = to_device(dev, g);
        auto du = to_device(dev, u);
        dev->glu(dg->as<float>(), du->as<float>(), n_tok, n, kind);
        sync();
        const auto got = from_device<float>(dev, dg->as<void>(), g.size());
        auto ref = g;
        for (int64_t t = 0; t < n_tok; ++t) {
          if (kind == ops::GluKind::kSilu) {
            ops::swiglu(ref.data() + t * n, u.data() + t * n, n);
          } else if (kind == ops::GluKind::kRelu) {
            ops::reglu(ref.data() + t * n, u.data() + t * n, n);
          } else {
            ops::dreglu(ref.data() + t * n, u.data() + t * n, n);
          }
        }
        for (size_t i = 0; i < ref.size(); ++i) {
          // exp (2 ulp on either side) and the division and product round: 16 u relative.
          ASSERT_NEAR(got[i], ref[i], 16 * kU * std::fabs(ref[i]) + 1e-30)
              << static_cast<int>(kind) << " n " << n << " i " << i;
        }
      }
    }
  }
}

TEST_F(DeviceOps, AddIsExact) {
  for (int64_t n : {1, 33, 1000, 4099}) {
    const auto y = randn(static_cast<size_t>(n), 53, 3.0f);
    const auto x = randn(static_cast<size_t>(n), 54);
    auto dy = to_device(dev, y);
    auto dx = to_device(dev, x);
    dev->add(dy->as<float>(), dx->as<float>(), n);
    sync();
    const auto sum = from_device<float>(dev, dy->as<void>(), y.size());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(sum[i], y[i] + x[i]) << "n " << n << " i " << i;
  }
}

// copy_to_device, an operation on the copy, copy_to_host: all queued, one sync.
void round_trip(ops::Device* dev, float* in, float* out, size_t n) {
  const auto x = randn(n, 61);
  std::copy(x.begin(), x.end(), in);
  std::fill(out, out + n, 0.0f);
  DeviceBuffer d(dev, n * 4);
  dev->copy_to_device(d.as<void>(), in, n * 4);
  dev->add(d.as<float>(), d.as<float>(), static_cast<int64_t>(n));  // y += y: exact doubling
  dev->copy_to_host(out, d.as<void>(), n * 4);
  check(dev->sync(), "sync");
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * x[i]) << "i " << i;
}

TEST_F(DeviceOps, QueuedCopiesRoundTripThroughHostBuffers) {
  const size_t n = 1 << 18;
  auto h_in = dev->alloc_host(n * 4);
  auto h_out = dev->alloc_host(n * 4);
  ASSERT_TRUE(h_in.ok()) << h_in.message();
  ASSERT_TRUE(h_out.ok()) << h_out.message();
  round_trip(dev, static_cast<float*>(*h_in), static_cast<float*>(*h_out), n);
  dev->free_host(*h_in);
  dev->free_host(*h_out);
}

TEST_F(DeviceOps, QueuedCopiesRoundTripThroughPlainHostMemory) {
  const size_t n = (1 << 18) + 3;
  std::vector<float> in(n), out(n);
  round_trip(dev, in.data(), out.data(), n);
  // Several copies to and from one plain buffer, all before one sync: each sees its own data.
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f), back(2000, 0.0f);
  DeviceBuffer d(dev, 2000 * 4);
  dev->copy_to_device(d.as<float>(), a.data(), 1000 * 4);
  dev->copy_to_device(d.as<float>() + 1000, b.data(), 1000 * 4);
  dev->copy_to_host(back.data() + 1000, d.as<float>(), 1000 * 4);
  dev->copy_to_host(back.data(), d.as<float>() + 1000, 1000 * 4);
  sync();
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(back[i], 2.0f) << i;
    ASSERT_EQ(back[1000 + i], 1.0f) << i;
  }
}

}  // namespace
}  // namespace hc::device_test
