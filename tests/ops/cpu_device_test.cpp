// The CPU device (ops/cpu/cpu_device.h): its budget accounting, its queue (in order,
// asynchronous, sync waits), compact weight uploads, and its operations against the host's
// kernels (bit-identical: same kernels, same layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cpu/cpu_device.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/sparse.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hc::ops {
namespace {

using ops_test::randn;

std::unique_ptr<Device> open(uint64_t budget = 0, int threads = 1, double emulate = 0,
                             double link = 16) {
  DeviceOptions o;
  o.link_gbps = link;
  o.budget_bytes = budget;
  o.n_threads = threads;
  o.mem_gbps = 10;
  o.emulate_gbps = emulate;
  auto d = open_cpu_device(o);
  EXPECT_TRUE(d.ok()) << d.message();
  return d.ok() ? std::move(*d) : nullptr;
}

// A [rows, cols] matrix of type t (quantised from random floats).
std::vector<uint8_t> weights(GgmlType t, int64_t cols, int64_t rows, uint32_t seed) {
  const std::vector<float> f = randn(static_cast<size_t>(rows * cols), seed, 0.3f);
  const int64_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row_ref(t, f.data() + r * cols, w.data() + r * rb, cols);
  return w;
}

TEST(CpuDevice, BudgetIsChargedRefusedAndFreed) {
  auto dev = open(1 << 20);
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->budget_bytes(), 1u << 20);
  auto a = dev->alloc(600 << 10, "first block");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(dev->charged_bytes(), 600u << 10);
  auto b = dev->alloc(600 << 10, "second block");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("second block"), std::string::npos) << b.message();
  EXPECT_NE(b.message().find("budget"), std::string::npos) << b.message();
  EXPECT_EQ(dev->charged_bytes(), 600u << 10);  // the refused request charged nothing
  auto c = dev->alloc(100, "small");            // rounded to 64 bytes
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(dev->charged_bytes(), (600u << 10) + 128);
  EXPECT_EQ(dev->measured_bytes(), dev->charged_bytes());
  dev->free(*a);
  dev->free(*c);
  EXPECT_EQ(dev->charged_bytes(), 0u);
  DeviceOptions bad;
  bad.n_threads = 0;
  EXPECT_FALSE(open_cpu_device(bad).ok());
}

TEST(CpuDevice, QueueRunsInOrderAsynchronouslyAndSyncWaits) {
  // Copies paced to 0.02 MB/s: each 4 KiB copy takes ~200 ms, far longer than queueing them
  // (microseconds) even on a loaded machine.
  auto dev = open(0, 1, /*emulate=*/1, /*link=*/0.00002);
  ASSERT_TRUE(dev);
  const int64_t n = 1024;
  auto buf = dev->alloc(n * 4, "buf");
  auto h_in = dev->alloc_host(n * 4);
  auto h_out = dev->alloc_host(n * 4);
  ASSERT_TRUE(buf.ok() && h_in.ok() && h_out.ok());
  auto* in = static_cast<float*>(*h_in);
  auto* out = static_cast<float*>(*h_out);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  std::memset(out, 0, n * 4);
  auto* d = static_cast<float*>(*buf);
  dev->copy_to_device(d, in, n * 4);
  dev->add(d, d, n);  // x = 2x, after the copy
  dev->copy_to_host(out, d, n * 4);
  // Queued, not done: the paced copies take milliseconds.
  EXPECT_EQ(out[n - 1], 0.0f);
  ASSERT_TRUE(dev->sync().ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f * static_cast<float>(i));
  dev->free(*buf);
  dev->free_host(*h_in);
  dev->free_host(*h_out);
}

TEST(CpuDevice, CompactUploadsHoldTheChosenRowsAndTheHostsLayout) {
  auto dev = open();
  const int64_t cols = 256, rows = 40;
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> w = weights(t, cols, rows, 7);
    TensorView host = TensorView::make(t, w.data(), cols, rows);
    const std::vector<int32_t> pick = {3, 4, 10, 17, 18, 19, 20, 21, 22, 23, 24, 25, 30, 31, 38, 39, 0};
    auto dw = dev->upload_weight(host, pick.data(), 0, static_cast<int64_t>(pick.size()), "w");
    ASSERT_TRUE(dw.ok()) << dw.message();
    EXPECT_EQ(dw->ne1, static_cast<int64_t>(pick.size()));
    const int64_t rb = row_bytes(t, cols);
    std::vector<uint8_t> back(static_cast<size_t>(rb));
    for (size_t j = 0; j < pick.size(); ++j) {
      ASSERT_TRUE(dev->download(back.data(), dw->row(static_cast<int64_t>(j)), rb).ok());
      EXPECT_EQ(std::memcmp(back.data(), host.row(pick[j]), rb), 0) << dtype_name(t) << " row " << j;
    }
    dev->free_weight(*dw);
  }
  EXPECT_EQ(dev->charged_bytes(), 0u);
}

// The planners count device bytes with weight_bytes: it must be exactly what upload_weight
// charges, for every type, with and without the host's decode layout (which the CPU device
// copies beside ggml's rows when the matrix has at least one group of rows), and for row counts
// on both sides of the group size.
TEST(CpuDevice, WeightBytesIsWhatUploadWeightCharges) {
  auto dev = open();
  ASSERT_TRUE(dev);
  const int64_t cols = 256, rows = 40;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::vector<uint8_t> w = weights(t, cols, rows, 11);
    TensorView host = TensorView::make(t, w.data(), cols, rows);
    std::vector<uint8_t> packed;
    for (bool with_layout : {false, true}) {
      if (with_layout) {
        if (!repack_available(t)) continue;
        packed.resize(static_cast<size_t>(repack_bytes(t, cols, rows)));
        repack_groups(host, 0, (rows + kRepackRows - 1) / kRepackRows, packed.data());
        host.packed = packed.data();
      }
      const int64_t g = kRepackRows;
      for (int64_t n : {int64_t{1}, int64_t{3}, g - 1, g, g + 1, rows}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + (with_layout ? " decode layout" : "") +
                     ", rows " + std::to_string(n));
        const uint64_t before = dev->charged_bytes();
        auto dw = dev->upload_weight(host, nullptr, 0, n, "w");
        ASSERT_TRUE(dw.ok()) << dw.message();
        const uint64_t charged = dev->charged_bytes() - before;
        EXPECT_EQ(dev->weight_bytes(host, n), charged);
        // The decode layout is charged on top of the rows, never instead of them.
        const uint64_t rows_only = dev->charge_bytes(static_cast<uint64_t>(row_bytes(t, cols) * n));
        EXPECT_EQ(charged > rows_only, with_layout && n >= kRepackRows);
        dev->free_weight(*dw);
      }
    }
  }
  EXPECT_EQ(dev->weight_bytes(TensorView::make(GgmlType::F32, nullptr, cols, rows), 0), 0u);
  EXPECT_EQ(dev->charged_bytes(), 0u);
}

// A host matrix in the decode layout: upload_weight builds the layout of the rows it holds, and
// update_rows rebuilds the groups it touches, so the device's layout is always the layout of its
// current rows (byte for byte) and its matmul equals the host's on those rows (bit for bit: the
// same kernels), for every type with a layout.
TEST(CpuDevice, DecodeLayoutFollowsUploadsAndRowUpdates) {
  auto dev = open(0, 2);
  ASSERT_TRUE(dev);
  ThreadPool pool(2);
  const int64_t cols = 512, rows = 70, n_dev = 37, n_tok = 3;
  for (GgmlType t : ops_test::kDeviceTypes) {
    if (!repack_available(t)) continue;
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> w = weights(t, cols, rows, 21);
    TensorView host = TensorView::make(t, w.data(), cols, rows);
    std::vector<uint8_t> host_layout(static_cast<size_t>(repack_bytes(t, cols, rows)));
    repack_groups(host, 0, (rows + kRepackRows - 1) / kRepackRows, host_layout.data());
    host.packed = host_layout.data();
    std::vector<int32_t> held(static_cast<size_t>(n_dev));
    for (int64_t j = 0; j < n_dev; ++j) held[j] = static_cast<int32_t>((j * 17 + 5) % rows);
    auto dw = dev->upload_weight(host, held.data(), 0, n_dev, "w");
    ASSERT_TRUE(dw.ok()) << dw.message();
    ASSERT_NE(dw->packed, nullptr);
    const std::vector<float> x = randn(static_cast<size_t>(n_tok * cols), 22);
    auto dx = dev->alloc(x.size() * 4, "x");
    auto dy = dev->alloc(static_cast<uint64_t>(n_tok * n_dev) * 4, "y");
    ASSERT_TRUE(dx.ok() && dy.ok());
    ASSERT_TRUE(dev->upload(*dx, x.data(), x.size() * 4).ok());
    const std::vector<int32_t> src = {69, 0, 33, 34, 2, 64};
    const std::vector<int32_t> slots = {0, 36, 15, 16, 17, 31};
    for (bool updated : {false, true}) {
      SCOPED_TRACE(updated ? "after update_rows" : "after upload_weight");
      if (updated) {
        dev->update_rows(*dw, host, src.data(), slots.data(), static_cast<int64_t>(src.size()));
        for (size_t j = 0; j < src.size(); ++j) held[slots[j]] = src[j];
      }
      dev->matmul(*dw, static_cast<float*>(*dx), n_tok, static_cast<float*>(*dy));
      ASSERT_TRUE(dev->sync().ok());
      // The host's rows held now, and their layout built from scratch.
      const int64_t rb = row_bytes(t, cols);
      std::vector<uint8_t> mine(static_cast<size_t>(rb * n_dev));
      for (int64_t j = 0; j < n_dev; ++j) std::memcpy(mine.data() + j * rb, host.row(held[j]), rb);
      TensorView v = TensorView::make(t, mine.data(), cols, n_dev);
      const size_t lb = static_cast<size_t>(repack_bytes(t, cols, n_dev));
      std::vector<uint8_t> layout_buf(lb + 64);  // the layout starts on a 64-byte boundary
      uint8_t* layout = layout_buf.data() + (64 - reinterpret_cast<uintptr_t>(layout_buf.data()) % 64) % 64;
      repack_groups(v, 0, (n_dev + kRepackRows - 1) / kRepackRows, layout);
      ASSERT_EQ(std::memcmp(layout, dw->packed, lb), 0);
      v.packed = layout;
      std::vector<float> want(static_cast<size_t>(n_tok * n_dev)), got(want.size());
      MatmulInput in;
      in.reset(x.data(), n_tok, cols);
      matmul(v, in, want.data(), pool);
      ASSERT_TRUE(dev->download(got.data(), *dy, got.size() * 4).ok());
      EXPECT_EQ(got, want);
    }
    dev->free(*dx);
    dev->free(*dy);
    dev->free_weight(*dw);
  }
  EXPECT_EQ(dev->charged_bytes(), 0u);
}

TEST(CpuDevice, OperationsEqualTheHostKernels) {
  auto dev = open(0, 2);
  ThreadPool pool(2);
  const int64_t n_embd = 128, n_ff = 96, n_tok = 3;
  std::vector<uint8_t> g = weights(GgmlType::Q8_0, n_embd, n_ff, 1);
  std::vector<uint8_t> u = weights(GgmlType::Q8_0, n_embd, n_ff, 2);
  std::vector<uint8_t> dt = weights(GgmlType::Q8_0, n_embd, n_ff, 3);  // down_t [n_ff, n_embd]
  TensorView G = TensorView::make(GgmlType::Q8_0, g.data(), n_embd, n_ff);
  TensorView U = TensorView::make(GgmlType::Q8_0, u.data(), n_embd, n_ff);
  TensorView D = TensorView::make(GgmlType::Q8_0, dt.data(), n_embd, n_ff);
  const std::vector<float> x = randn(static_cast<size_t>(n_tok * n_embd), 4);
  // Host reference: the firing set from the gate, then the sparse operators over it.
  std::vector<float> gate(static_cast<size_t>(n_tok * n_ff));
  MatmulInput in;
  in.reset(x.data(), n_tok, n_embd);
  matmul(G, in, gate.data(), pool);
  std::vector<int32_t> idx;
  for (int64_t i = 0; i < n_ff; ++i) {
    bool any = false;
    for (int64_t t = 0; t < n_tok; ++t) any |= gate[t * n_ff + i] > 0.0f;
    if (any) idx.push_back(static_cast<int32_t>(i));
  }
  const int64_t n_idx = static_cast<int64_t>(idx.size());
  ASSERT_GT(n_idx, 0);
  std::vector<float> gs(static_cast<size_t>(n_tok * n_idx)), us(gs.size());
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < n_idx; ++j) gs[t * n_idx + j] = gate[t * n_ff + idx[j]];
  sparse_rows(U, in, idx.data(), n_idx, us.data(), pool);
  for (int64_t t = 0; t < n_tok; ++t) {
    reglu(gs.data() + t * n_idx, us.data() + t * n_idx, n_idx);
    for (int64_t j = 0; j < n_idx; ++j)
      if (!(gate[t * n_ff + idx[j]] > 0.0f)) gs[t * n_idx + j] = 0.0f;
  }
  std::vector<float> want(static_cast<size_t>(n_tok * n_embd));
  sparse_down(D, idx.data(), n_idx, gs.data(), n_tok, want.data(), pool);

  auto dG = dev->upload_weight(G, nullptr, 0, n_ff, "gate");
  auto dU = dev->upload_weight(U, nullptr, 0, n_ff, "up");
  auto dD = dev->upload_weight(D, nullptr, 0, n_ff, "down_t");
  auto dx = dev->alloc(x.size() * 4, "x");
  auto dout = dev->alloc(want.size() * 4, "out");
  ASSERT_TRUE(dG.ok() && dU.ok() && dD.ok() && dx.ok() && dout.ok());
  ASSERT_TRUE(dev->upload(*dx, x.data(), x.size() * 4).ok());
  dev->ffn_threshold(*dG, nullptr, *dU, *dD, static_cast<float*>(*dx), n_tok, 0.0f, GluKind::kRelu,
                     static_cast<float*>(*dout));
  std::vector<float> got(want.size());
  ASSERT_TRUE(dev->download(got.data(), *dout, got.size() * 4).ok());
  EXPECT_EQ(got, want);

  // ffn_rows with the same set and masks gives the same result.
  auto didx = dev->alloc(idx.size() * 4, "idx");
  auto dfire = dev->alloc(static_cast<uint64_t>(n_tok * n_idx), "fire");
  ASSERT_TRUE(didx.ok() && dfire.ok());
  std::vector<uint8_t> fire(static_cast<size_t>(n_tok * n_idx));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < n_idx; ++j) fire[t * n_idx + j] = gate[t * n_ff + idx[j]] > 0.0f;
  ASSERT_TRUE(dev->upload(*didx, idx.data(), idx.size() * 4).ok());
  ASSERT_TRUE(dev->upload(*dfire, fire.data(), fire.size()).ok());
  dev->ffn_rows(*dG, nullptr, *dU, *dD, static_cast<float*>(*dx), n_tok, static_cast<int32_t*>(*didx),
                n_idx, static_cast<uint8_t*>(*dfire), GluKind::kRelu, static_cast<float*>(*dout));
  ASSERT_TRUE(dev->download(got.data(), *dout, got.size() * 4).ok());
  EXPECT_EQ(got, want);
  // n_idx = 0: zeros.
  dev->ffn_rows(*dG, nullptr, *dU, *dD, static_cast<float*>(*dx), n_tok, static_cast<int32_t*>(*didx), 0,
                static_cast<uint8_t*>(*dfire), GluKind::kRelu, static_cast<float*>(*dout));
  ASSERT_TRUE(dev->download(got.data(), *dout, got.size() * 4).ok());
  for (float v : got) ASSERT_EQ(v, 0.0f);

  // rmsnorm, glu, matmul.
  std::vector<float> nw = randn(static_cast<size_t>(n_embd), 5), hn(x.size());
  for (int64_t t = 0; t < n_tok; ++t)
    rmsnorm(hn.data() + t * n_embd, x.data() + t * n_embd, nw.data(), n_embd, 1e-5f);
  auto dnw = dev->alloc(nw.size() * 4, "norm");
  ASSERT_TRUE(dnw.ok());
  ASSERT_TRUE(dev->upload(*dnw, nw.data(), nw.size() * 4).ok());
  dev->rmsnorm(static_cast<float*>(*dout), static_cast<float*>(*dx), static_cast<float*>(*dnw),
               n_tok, n_embd, 1e-5f);
  ASSERT_TRUE(dev->download(got.data(), *dout, got.size() * 4).ok());
  EXPECT_EQ(got, hn);
  auto dy = dev->alloc(static_cast<uint64_t>(n_tok * n_ff) * 4, "y");
  ASSERT_TRUE(dy.ok());
  dev->matmul(*dG, static_cast<float*>(*dx), n_tok, static_cast<float*>(*dy));
  std::vector<float> y(static_cast<size_t>(n_tok * n_ff));
  ASSERT_TRUE(dev->download(y.data(), *dy, y.size() * 4).ok());
  EXPECT_EQ(y, gate);
  for (void* p : {*dx, *dout, *didx, *dfire, *dnw, *dy}) dev->free(p);
  for (auto* w : {&*dG, &*dU, &*dD}) dev->free_weight(*w);
  EXPECT_EQ(dev->charged_bytes(), 0u);
}

}  // namespace
}  // namespace hc::ops
