// Argument errors of queued operations (ops/device.h): an operation a device cannot run (an
// unsupported weight type, an attention shape it does not handle, KV positions past the cache,
// FFN matrices that disagree, a RoPE past the head, a malformed weight) is skipped, writes
// nothing, and is reported by the next sync(), naming the operation (the first such error since
// the last sync(); later ones are dropped); the error is reported once and the device keeps
// working. An empty operation is no error. Every device kind runs these.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

class DeviceErrors : public DeviceTest {
 protected:
  // The next sync() fails naming every word of `names`; the one after succeeds, and the device
  // still computes.
  void expect_reported(const std::vector<std::string>& names) {
    const Status st = dev->sync();
    ASSERT_FALSE(st.ok()) << "no error reported for " << names[0];
    for (const std::string& n : names)
      EXPECT_NE(st.message().find(n), std::string::npos) << "'" << n << "' in: " << st.message();
    EXPECT_TRUE(dev->sync().ok());  // reported once
    const std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {0.5f, 4.0f, -1.25f};
    auto da = to_device(dev, a);
    auto db = to_device(dev, b);
    dev->add(da->as<float>(), db->as<float>(), 3);
    sync();
    EXPECT_EQ(from_device<float>(dev, da->as<void>(), 3), (std::vector<float>{2.0f, 2.0f, 2.0f}));
  }
};

TEST_F(DeviceErrors, UnsupportedWeightTypeIsReportedBySyncAndWritesNothing) {
  const int64_t rows = 4, cols = 64, n_tok = 2;
  const std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(GgmlType::Q5_0, cols) * rows));
  auto dw = to_device(dev, bytes);
  const auto x = randn(static_cast<size_t>(n_tok * cols), 5);
  auto dx = to_device(dev, x);
  const std::vector<float> sentinel(static_cast<size_t>(n_tok * cols), 42.0f);
  auto dy = to_device(dev, sentinel);
  const TensorView w = TensorView::make(GgmlType::Q5_0, dw->as<void>(), cols, rows);
  dev->matmul(w, dx->as<float>(), n_tok, dy->as<float>());
  expect_reported({"matmul", "Q5_0"});
  EXPECT_EQ(from_device<float>(dev, dy->as<void>(), sentinel.size()), sentinel);

  // The FFN operators likewise (all three matrices of the unsupported type).
  const std::vector<int32_t> idx = {0, 2};
  const std::vector<uint8_t> fire(static_cast<size_t>(n_tok * 2), 1);
  auto didx = to_device(dev, idx);
  auto dfire = to_device(dev, fire);
  dev->ffn_rows(w, nullptr, w, w, dx->as<float>(), n_tok, didx->as<int32_t>(), 2, dfire->as<uint8_t>(),
                ops::GluKind::kSilu, dy->as<float>());
  expect_reported({"ffn_rows", "Q5_0"});
  dev->ffn_threshold(w, nullptr, w, w, dx->as<float>(), n_tok, 0.0f, ops::GluKind::kRelu,
                     dy->as<float>());
  expect_reported({"ffn_threshold", "Q5_0"});
  EXPECT_EQ(from_device<float>(dev, dy->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, AttentionRejectsUnsupportedShapes) {
  const ops::AttentionShape sh{6, 4, 64, 256, 16};  // 6 heads cannot share 4 KV heads
  DeviceBuffer buf(dev, 1 << 20);
  const std::vector<float> sentinel(6 * 64, 42.0f);
  auto out = to_device(dev, sentinel);
  dev->attention(buf.as<float>(), buf.as<fp16_t>(), buf.as<fp16_t>(), 0, 1, sh, 1.0f,
                 out->as<float>());
  expect_reported({"attention"});
  EXPECT_EQ(from_device<float>(dev, out->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, KvStorePastTheCacheIsReportedBySyncAndWritesNothing) {
  const int n_ctx = 50;
  const int64_t kv_dim = 96, n_tok = 7;
  const auto k = randn(static_cast<size_t>(n_tok * kv_dim), 31);
  auto dk = to_device(dev, k);
  const std::vector<fp16_t> sentinel(static_cast<size_t>(n_ctx * kv_dim), 0x7e00);
  auto kc = to_device(dev, sentinel);
  auto vc = to_device(dev, sentinel);
  dev->kv_store(dk->as<float>(), dk->as<float>(), n_tok, n_ctx - 3, kv_dim, n_ctx,
                kc->as<fp16_t>(), vc->as<fp16_t>());
  expect_reported({"kv_store"});
  EXPECT_EQ(from_device<fp16_t>(dev, kc->as<void>(), sentinel.size()), sentinel);
  EXPECT_EQ(from_device<fp16_t>(dev, vc->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, MismatchedFfnMatricesAreReportedBySync) {
  const Matrix gate = make_matrix(dev, GgmlType::Q8_0, 8, 256, 3000);
  const Matrix up = make_matrix(dev, GgmlType::Q8_0, 9, 256, 3001);  // one neuron too many
  const Matrix down_t = make_matrix(dev, GgmlType::Q8_0, 8, 256, 3002);
  const Matrix short_up = make_matrix(dev, GgmlType::Q8_0, 8, 224, 3003);  // rows too short
  const auto x = randn(256, 3004);
  auto dx = to_device(dev, x);
  const std::vector<float> sentinel(256, 42.0f);
  auto out = to_device(dev, sentinel);
  dev->ffn_threshold(gate.view(), nullptr, up.view(), down_t.view(), dx->as<float>(), 1, 0.0f,
                     ops::GluKind::kRelu, out->as<float>());
  expect_reported({"ffn_threshold"});
  const std::vector<int32_t> idx = {1, 4};
  const std::vector<uint8_t> fire = {1, 1};
  auto didx = to_device(dev, idx);
  auto dfire = to_device(dev, fire);
  dev->ffn_rows(gate.view(), nullptr, short_up.view(), down_t.view(), dx->as<float>(), 1,
                didx->as<int32_t>(), 2, dfire->as<uint8_t>(), ops::GluKind::kSilu,
                out->as<float>());
  expect_reported({"ffn_rows"});
  EXPECT_EQ(from_device<float>(dev, out->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, RopeOutsideTheHeadOrBeforePositionZeroIsReportedBySync) {
  const int n_head = 2, head_dim = 64;
  const auto x = randn(static_cast<size_t>(n_head * head_dim), 41);
  auto dx = to_device(dev, x);
  for (bool neox : {false, true}) {
    dev->rope(dx->as<float>(), 1, n_head, head_dim, head_dim + 2, 0, 0.5f, 1.0f, nullptr, neox);
    expect_reported({"rope", "n_rot"});
    dev->rope(dx->as<float>(), 1, n_head, head_dim, head_dim, -1, 0.5f, 1.0f, nullptr, neox);
    expect_reported({"rope", "pos0"});
  }
  EXPECT_EQ(from_device<float>(dev, dx->as<void>(), x.size()), x);
}

// The row operations (add_rows, get_rows, set_rows_scaled; rope's x too): a null pointer of a
// non-empty operation is reported and nothing is written; an empty one (n, width or n_tok <= 0)
// does nothing and is no error, whatever its pointers (an expert no token was routed to).
TEST_F(DeviceErrors, RowOpsWithNullPointersAreReportedBySync) {
  const int64_t n = 2, width = 70;
  const auto src = randn(static_cast<size_t>(n * width), 61);
  const std::vector<int32_t> idx = {1, 0};
  const std::vector<float> scale = {0.5f, 2.0f};
  auto dsrc = to_device(dev, src);
  auto didx = to_device(dev, idx);
  auto dscale = to_device(dev, scale);
  const std::vector<float> sentinel(static_cast<size_t>(n * width), 42.0f);
  auto dst = to_device(dev, sentinel);
  float* d = dst->as<float>();
  const float* s = dsrc->as<float>();
  const int32_t* i = didx->as<int32_t>();
  const float* sc = dscale->as<float>();
  dev->add_rows(d, nullptr, n, width);
  expect_reported({"add_rows", "b is null"});
  dev->add_rows(nullptr, s, n, width);
  expect_reported({"add_rows", "y is null"});
  dev->get_rows(d, s, nullptr, n, width);
  expect_reported({"get_rows", "idx is null"});
  dev->get_rows(d, nullptr, i, n, width);
  expect_reported({"get_rows", "src is null"});
  dev->get_rows(nullptr, s, i, n, width);
  expect_reported({"get_rows", "dst is null"});
  dev->set_rows_scaled(d, s, i, nullptr, n, width);
  expect_reported({"set_rows_scaled", "scale is null"});
  dev->set_rows_scaled(d, s, nullptr, sc, n, width);
  expect_reported({"set_rows_scaled", "idx is null"});
  dev->set_rows_scaled(nullptr, s, i, sc, n, width);
  expect_reported({"set_rows_scaled", "dst is null"});
  dev->rope(nullptr, 1, 2, 64, 64, 0, 0.5f, 1.0f, nullptr, true);
  expect_reported({"rope", "x is null"});
  EXPECT_EQ(from_device<float>(dev, dst->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, BadRoutingArgumentsAreReportedBySync) {
  std::vector<float> logits = randn(64, 63);  // 8 experts' logits; also a row of the matrix's x
  auto dx = to_device(dev, logits);
  DeviceBuffer ids(dev, 64), w(dev, 64), y(dev, 4 * 64 * 4);
  const Matrix m = make_matrix(dev, GgmlType::Q8_0, 4 * 8, 64, 64);
  ops::MoeGate g;
  dev->moe_topk(dx->as<float>(), 1, 8, 9, g, ids.as<int32_t>(), w.as<float>());
  expect_reported({"moe_topk", "k 9 of 8 experts"});
  dev->moe_topk(dx->as<float>(), 1, 8, 2, g, nullptr, w.as<float>());
  expect_reported({"moe_topk", "ids is null"});
  dev->matmul_id(m.view(), 5, ids.as<int32_t>(), 2, dx->as<float>(), 0, y.as<float>());
  expect_reported({"matmul_id", "rows 5 per matrix"});
  dev->matmul_id(m.view(), 8, ids.as<int32_t>(), 2, dx->as<float>(), 3, y.as<float>());
  expect_reported({"matmul_id", "x_stride 3"});
  dev->matmul_id(m.view(), 8, nullptr, 2, dx->as<float>(), 0, y.as<float>());
  expect_reported({"matmul_id", "ids is null"});
  dev->moe_combine(y.as<float>(), w.as<float>(), 1, 0, 8, y.as<float>());
  expect_reported({"moe_combine", "k 0"});
  if (std::string(kDeviceKind) == "cpu") {  // the CPU device checks ids when it runs
    const std::vector<int32_t> bad = {1, 4};
    auto dbad = to_device(dev, bad);
    dev->matmul_id(m.view(), 8, dbad->as<int32_t>(), 2, dx->as<float>(), 0, y.as<float>());
    expect_reported({"matmul_id", "id 4", "not in [0, 4)"});
  }
}

TEST_F(DeviceErrors, EmptyRowOpsDoNothing) {
  const int64_t width = 70;
  const auto src = randn(static_cast<size_t>(2 * width), 62);
  const std::vector<int32_t> idx = {1, 0};
  const std::vector<float> scale = {0.5f, 2.0f};
  auto dsrc = to_device(dev, src);
  auto didx = to_device(dev, idx);
  auto dscale = to_device(dev, scale);
  const std::vector<float> sentinel(static_cast<size_t>(2 * width), 42.0f);
  auto dst = to_device(dev, sentinel);
  float* d = dst->as<float>();
  const float* s = dsrc->as<float>();
  const int32_t* i = didx->as<int32_t>();
  const float* sc = dscale->as<float>();
  for (int64_t empty : {int64_t{0}, int64_t{-1}, int64_t{-1000}}) {
    dev->add_rows(d, s, empty, width);
    dev->add_rows(d, s, 2, empty);
    dev->get_rows(d, s, i, empty, width);
    dev->get_rows(d, s, i, 2, empty);
    dev->set_rows_scaled(d, s, i, sc, empty, width);
    dev->set_rows_scaled(d, s, i, sc, 2, empty);
    // Empty with null pointers.
    dev->add_rows(nullptr, nullptr, empty, width);
    dev->get_rows(nullptr, nullptr, nullptr, empty, width);
    dev->set_rows_scaled(nullptr, nullptr, nullptr, nullptr, 2, empty);
    dev->rope(nullptr, empty, 2, 64, 64, 0, 0.5f, 1.0f, nullptr, true);
    dev->rope(d, 1, static_cast<int>(empty), 64, 64, 0, 0.5f, 1.0f, nullptr, true);
    const Status st = dev->sync();
    EXPECT_TRUE(st.ok()) << "empty " << empty << ": " << st.message();
  }
  EXPECT_EQ(from_device<float>(dev, dst->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, MalformedWeightsAreReportedBySync) {
  const int64_t rows = 4, cols = 64;
  const Matrix m = make_matrix(dev, GgmlType::Q8_0, rows, cols, 4000);
  const auto x = randn(static_cast<size_t>(cols), 4001);
  auto dx = to_device(dev, x);
  const std::vector<float> sentinel(static_cast<size_t>(cols), 42.0f);
  auto dy = to_device(dev, sentinel);
  TensorView w = m.view();
  w.data = nullptr;
  dev->matmul(w, dx->as<float>(), 1, dy->as<float>());
  expect_reported({"matmul", "Q8_0", "no data"});
  w = m.view();
  w.ne0 = 48;  // not whole blocks of 32
  dev->matmul(w, dx->as<float>(), 1, dy->as<float>());
  expect_reported({"matmul", "Q8_0", "whole blocks of 32"});
  w = m.view();
  w.nb1 = row_bytes(GgmlType::Q8_0, cols) - 2;  // rows overlap
  dev->matmul(w, dx->as<float>(), 1, dy->as<float>());
  expect_reported({"matmul", "overlap"});
  // An FFN matrix with rows of the wrong length.
  const Matrix gate = make_matrix(dev, GgmlType::Q8_0, 8, cols, 4002);
  const Matrix short_down = make_matrix(dev, GgmlType::Q8_0, 8, cols - 32, 4003);
  dev->ffn_threshold(gate.view(), nullptr, gate.view(), short_down.view(), dx->as<float>(), 1, 0.0f,
                     ops::GluKind::kRelu, dy->as<float>());
  expect_reported({"ffn_threshold", "down_t", "64 inputs per row"});
  EXPECT_EQ(from_device<float>(dev, dy->as<void>(), sentinel.size()), sentinel);
}

TEST_F(DeviceErrors, SyncReportsTheFirstErrorSinceTheLastSync) {
  const int n_ctx = 16;
  const int64_t kv_dim = 32;
  const auto k = randn(static_cast<size_t>(kv_dim), 51);
  auto dk = to_device(dev, k);
  const std::vector<fp16_t> sentinel(static_cast<size_t>(n_ctx * kv_dim), 0x7e00);
  auto kc = to_device(dev, sentinel);
  auto vc = to_device(dev, sentinel);
  dev->kv_store(dk->as<float>(), dk->as<float>(), 1, -1, kv_dim, n_ctx, kc->as<fp16_t>(),
                vc->as<fp16_t>());
  const ops::AttentionShape sh{6, 4, 8, kv_dim, n_ctx};
  std::vector<float> out(48, 42.0f);
  auto dout = to_device(dev, out);
  dev->attention(dk->as<float>(), kc->as<fp16_t>(), vc->as<fp16_t>(), 0, 1, sh, 1.0f,
                 dout->as<float>());
  const Status st = dev->sync();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("kv_store"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("attention"), std::string::npos) << st.message();
  EXPECT_TRUE(dev->sync().ok());
  EXPECT_EQ(from_device<fp16_t>(dev, kc->as<void>(), sentinel.size()), sentinel);
  EXPECT_EQ(from_device<float>(dev, dout->as<void>(), out.size()), out);
}

}  // namespace
}  // namespace hc::device_test
