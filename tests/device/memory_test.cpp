// Every device's memory accounting, weight uploads, row migration and profile (ops/device.h):
//   - an allocation past the budget fails with a message naming the use and the budget, and
//     allocates nothing; charged never exceeds the budget and returns to where it started once
//     everything is freed; the memory the device reports in use stays within the budget;
//   - weight_bytes and charge_bytes are exactly what upload_weight and alloc charge (the
//     planners count device bytes with them);
//   - upload_weight stores the named rows; update_rows replaces exactly the named slots with the
//     named host rows, in queue order;
//   - the device's own operation scratch: reserve_scratch charges exactly scratch_bytes, and
//     operations within the reserved needs charge nothing more (a session's device bytes are
//     known before it runs); a reservation past the budget fails naming it;
//   - the profile holds finite, positive numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

class DeviceMemory : public DeviceTest {};

std::unique_ptr<ops::Device> open_with_budget(uint64_t budget) {
  auto r = open_test_device(budget);
  check(r.status(),
        std::string(kDeviceKind) + " device with a budget of " + std::to_string(budget));
  return std::move(r).value();
}

// Fills a device until less than `left` bytes of its budget remain but at least `left` - 64 KiB
// (within the charge rounding of 64 KiB buffers): one large buffer, then 64 KiB ones.
std::vector<std::unique_ptr<DeviceBuffer>> fill_until(ops::Device* d, uint64_t left) {
  std::vector<std::unique_ptr<DeviceBuffer>> fillers;
  auto room = [&] { return d->budget_bytes() - d->charged_bytes(); };
  constexpr uint64_t kStep = 64 * 1024;
  if (room() > left + 4 * kMiB) {
    uint64_t lo = 0, hi = room() - left - 4 * kMiB;  // the largest buffer charged within that
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (d->charge_bytes(mid) <= room() - left - 4 * kMiB) lo = mid;
      else hi = mid - 1;
    }
    if (lo > 0) fillers.push_back(std::make_unique<DeviceBuffer>(d, lo));
  }
  while (room() >= left + d->charge_bytes(kStep))
    fillers.push_back(std::make_unique<DeviceBuffer>(d, kStep));
  return fillers;
}

TEST_F(DeviceMemory, AllocationsStayWithinTheBudget) {
  // The shared device tells the fixed overhead; a second device gets 64 MiB beyond it. (A
  // second CUDA device in the process shares the first one's context, so its own overhead is
  // smaller and its room larger: the bounds below use the room it reports.)
  const uint64_t budget = dev->overhead_bytes() + 64 * kMiB;
  auto d = open_with_budget(budget);
  ASSERT_EQ(d->budget_bytes(), budget);
  const uint64_t start = d->charged_bytes();
  ASSERT_EQ(start, d->overhead_bytes());  // nothing but the fixed overhead yet
  ASSERT_LE(start, budget);

  // One byte too many: an error naming the use and the budget, and nothing charged.
  const uint64_t room = budget - start;
  auto too_big = d->alloc(room + 1, "blk.0.ffn_up.weight");
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.message().find("blk.0.ffn_up.weight"), std::string::npos) << too_big.message();
  EXPECT_TRUE(names_budget(too_big.message(), budget)) << too_big.message();
  EXPECT_EQ(d->charged_bytes(), start);

  // Fill the budget with 4 MiB buffers and a few small ones; every refusal charges nothing.
  std::vector<void*> bufs;
  for (;;) {
    const uint64_t before = d->charged_bytes();
    auto r = d->alloc(4 * kMiB, "filler");
    if (!r.ok()) {
      EXPECT_TRUE(names_budget(r.message(), budget)) << r.message();
      EXPECT_EQ(d->charged_bytes(), before);
      break;
    }
    bufs.push_back(r.value());
    ASSERT_LE(d->charged_bytes(), budget);
    ASSERT_LE(bufs.size(), room / d->charge_bytes(4 * kMiB))
        << "a room of " << room << " bytes filled with 4 MiB buffers and still no refusal";
  }
  for (int i = 0; i < 64; ++i) {
    auto r = d->alloc(4096, "small filler");
    if (!r.ok()) break;
    bufs.push_back(r.value());
  }
  EXPECT_LE(d->charged_bytes(), budget);
  EXPECT_GT(d->charged_bytes() + d->charge_bytes(4 * kMiB), budget);  // really close to it
  EXPECT_LE(d->measured_bytes(), budget) << "charged " << d->charged_bytes();
  for (void* p : bufs) d->free(p);
  EXPECT_EQ(d->charged_bytes(), start);  // nothing leaked
  EXPECT_TRUE(d->sync().ok());
}

// A [rows, cols] host matrix of type t (random weights, ggml layout, no decode layout).
struct HostMatrix {
  std::vector<uint8_t> bytes;
  TensorView view;
};
HostMatrix host_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = randn(static_cast<size_t>(rows * cols), seed, 0.5f);
  const int64_t rb = row_bytes(t, cols);
  HostMatrix m;
  m.bytes.resize(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(t, f.data() + r * cols, m.bytes.data() + r * rb, cols);
  m.view = TensorView::make(t, m.bytes.data(), cols, rows);
  return m;
}

// The device rows of w (from upload_weight), downloaded.
std::vector<uint8_t> rows_of(ops::Device* dev, const TensorView& w) {
  return from_device<uint8_t>(dev, w.data, static_cast<size_t>(row_bytes(w.type, w.ne0) * w.ne1));
}

// Row r of a host matrix, as bytes.
std::vector<uint8_t> host_row(const TensorView& h, int64_t r) {
  const int64_t rb = row_bytes(h.type, h.ne0);
  return {h.row(r), h.row(r) + rb};
}
std::vector<uint8_t> device_row(const std::vector<uint8_t>& rows, const TensorView& w, int64_t r) {
  const int64_t rb = row_bytes(w.type, w.ne0);
  return {rows.begin() + r * rb, rows.begin() + (r + 1) * rb};
}

// The planners count device bytes with weight_bytes and charge_bytes: exactly what
// upload_weight and alloc charge, on both sides of the granule sizes devices round to.
TEST_F(DeviceMemory, WeightBytesIsWhatUploadWeightCharges) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16, GgmlType::F32}) {
    const int64_t cols = dtype_traits(t).block_size == 256 ? 1024 : 1056;
    const HostMatrix host = host_matrix(t, 600, cols, 7);
    EXPECT_EQ(dev->weight_bytes(host.view, 0), 0u);
    for (int64_t n : {1, 7, 16, 17, 240, 241, 600}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(n));
      const uint64_t before = dev->charged_bytes();
      auto dw = dev->upload_weight(host.view, nullptr, 0, n, "w");
      ASSERT_TRUE(dw.ok()) << dw.message();
      EXPECT_EQ(dev->weight_bytes(host.view, n), dev->charged_bytes() - before);
      const auto got = rows_of(dev, *dw);
      for (int64_t r = 0; r < n; r += std::max<int64_t>(1, n / 5))
        ASSERT_EQ(device_row(got, *dw, r), host_row(host.view, r)) << "row " << r;
      dev->free_weight(*dw);
      EXPECT_EQ(dev->charged_bytes(), before);
    }
    // A compact matrix of chosen rows (any order, repeats allowed).
    const std::vector<int32_t> rows = {599, 3, 3, 42, 0, 17, 300, 301, 598, 5, 250};
    const int64_t n = static_cast<int64_t>(rows.size());
    const uint64_t before = dev->charged_bytes();
    auto dw = dev->upload_weight(host.view, rows.data(), 0, n, "compact");
    ASSERT_TRUE(dw.ok()) << dw.message();
    EXPECT_EQ(dev->weight_bytes(host.view, n), dev->charged_bytes() - before) << dtype_name(t);
    const auto got = rows_of(dev, *dw);
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(device_row(got, *dw, j), host_row(host.view, rows[j])) << dtype_name(t) << " " << j;
    dev->free_weight(*dw);
    EXPECT_EQ(dev->charged_bytes(), before);
  }
  // A row range not starting at row 0.
  const HostMatrix host = host_matrix(GgmlType::Q6_K, 100, 512, 8);
  auto dw = dev->upload_weight(host.view, nullptr, 37, 20, "range");
  ASSERT_TRUE(dw.ok()) << dw.message();
  const auto got = rows_of(dev, *dw);
  for (int64_t j = 0; j < 20; ++j) ASSERT_EQ(device_row(got, *dw, j), host_row(host.view, 37 + j));
  dev->free_weight(*dw);
}

TEST_F(DeviceMemory, ChargeBytesIsWhatAllocCharges) {
  for (uint64_t b : {uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{65}, uint64_t{513},
                     uint64_t{4095}, uint64_t{4096}, uint64_t{4097}, kMiB - 1, kMiB, kMiB + 1,
                     2 * kMiB + 1, 5 * kMiB + 3}) {
    SCOPED_TRACE(b);
    const uint64_t before = dev->charged_bytes();
    auto p = dev->alloc(b, "probe");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(dev->charge_bytes(b), dev->charged_bytes() - before);
    EXPECT_GE(dev->charge_bytes(b), b);
    dev->free(*p);
    EXPECT_EQ(dev->charged_bytes(), before);
  }
  // Several live at once add up.
  const uint64_t before = dev->charged_bytes();
  std::vector<void*> ps;
  uint64_t sum = 0;
  for (uint64_t b : {uint64_t{100}, uint64_t{5000}, kMiB + 7}) {
    auto p = dev->alloc(b, "probe");
    ASSERT_TRUE(p.ok()) << p.message();
    ps.push_back(*p);
    sum += dev->charge_bytes(b);
  }
  EXPECT_EQ(dev->charged_bytes() - before, sum);
  for (void* p : ps) dev->free(p);
  EXPECT_EQ(dev->charged_bytes(), before);
}

// The device's own scratch (quantised activations, an FFN's h, a GEMM's dequantised rows):
// reserved up front for the largest operations, then never grown by operations within them.
TEST_F(DeviceMemory, ReservedScratchIsAllThatOperationsCharge) {
  auto d = open_with_budget(0);  // fresh: no scratch yet
  const int64_t n_embd = 1024, n_ff = 96, n_tok = 40;  // > 32 tokens: CUDA's GEMM path too
  Matrix w = make_matrix(d.get(), GgmlType::Q4_0, 512, n_embd, 31);
  Matrix f = make_matrix(d.get(), GgmlType::F32, 64, n_embd, 32);
  Matrix gate = make_matrix(d.get(), GgmlType::Q8_0, n_ff, n_embd, 33);
  Matrix up = make_matrix(d.get(), GgmlType::Q4_K, n_ff, n_embd, 34);
  Matrix down_t = make_matrix(d.get(), GgmlType::Q8_0, n_ff, n_embd, 35);
  ops::ScratchNeeds needs;
  needs.max_tokens = n_tok;
  needs.matmul = {{w.type, w.cols, w.rows}, {f.type, f.cols, f.rows}};
  needs.ffn = {{gate.type, n_embd, n_ff}, {up.type, n_embd, n_ff}};
  const uint64_t predicted = d->scratch_bytes(needs);
  const uint64_t before = d->charged_bytes();
  check(d->reserve_scratch(needs), "reserve_scratch");
  const uint64_t reserved = d->charged_bytes();
  EXPECT_EQ(reserved - before, predicted);
  // Operations within the needs: nothing more is charged.
  const auto x = randn(static_cast<size_t>(n_tok * n_embd), 36, 0.5f);
  auto dx = to_device(d.get(), x);
  DeviceBuffer y(d.get(), static_cast<uint64_t>(n_tok * w.rows) * 4);
  DeviceBuffer out(d.get(), static_cast<uint64_t>(n_tok * n_embd) * 4);
  const uint64_t with_buffers = d->charged_bytes();
  for (int64_t nt : {n_tok, int64_t{1}, int64_t{9}}) {
    d->matmul(w.view(), dx->as<float>(), nt, y.as<float>());
    d->matmul(f.view(), dx->as<float>(), nt, y.as<float>());
    d->ffn_threshold(gate.view(), nullptr, up.view(), down_t.view(), dx->as<float>(), nt, 0.1f,
                     ops::GluKind::kSilu, out.as<float>());
  }
  check(d->sync(), "operations");
  EXPECT_EQ(d->charged_bytes(), with_buffers);
  // Reserving again, or for less, changes nothing.
  check(d->reserve_scratch(needs), "reserve_scratch again");
  ops::ScratchNeeds less = needs;
  less.max_tokens = 1;
  less.ffn.pop_back();
  check(d->reserve_scratch(less), "reserve_scratch for less");
  EXPECT_EQ(d->charged_bytes(), with_buffers);
  // Past the budget: an error naming it, nothing charged. (A device with no scratch of its
  // own, like the CPU device, cannot fail here.)
  if (predicted > 0) {
    // Less room than the scratch needs. Set by allocations, not by the budget alone: a device's
    // own overhead depends on what the process already holds (a CUDA device opened after
    // another shares its context), so a budget of someone else's overhead + predicted / 2
    // left the first H100 run more room than predicted.
    auto small = open_with_budget(d->overhead_bytes() + 2 * predicted + 64 * kMiB);
    const auto fillers = fill_until(small.get(), predicted / 2);
    ASSERT_LT(small->budget_bytes() - small->charged_bytes(), predicted);
    const uint64_t c0 = small->charged_bytes();
    Status st = small->reserve_scratch(needs);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("budget"), std::string::npos) << st.message();
    EXPECT_LE(small->charged_bytes(), small->budget_bytes());
    EXPECT_GE(small->charged_bytes(), c0);
  }
}

// Row migration: update_rows writes the named host rows into the named slots, leaves every
// other slot alone, and runs in queue order (a matmul queued before it sees the old rows, one
// queued after it the new ones).
TEST_F(DeviceMemory, UpdateRowsReplacesExactlyTheNamedSlots) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t cols = 512, n_host = 200, n_dev = 48;
    const HostMatrix host = host_matrix(t, n_host, cols, 11);
    std::vector<int32_t> held(static_cast<size_t>(n_dev));
    for (int64_t j = 0; j < n_dev; ++j) held[j] = static_cast<int32_t>(3 * j + 1);
    auto dw = dev->upload_weight(host.view, held.data(), 0, n_dev, "hot rows");
    ASSERT_TRUE(dw.ok()) << dw.message();
    const std::vector<int32_t> src = {199, 0, 57, 58, 100, 2};
    const std::vector<int32_t> slots = {0, 47, 5, 6, 20, 33};
    const auto x = randn(static_cast<size_t>(3 * cols), 12);
    auto dx = to_device(dev, x);
    DeviceBuffer y_old(dev, 3 * n_dev * 4), y_new(dev, 3 * n_dev * 4);
    dev->matmul(*dw, dx->as<float>(), 3, y_old.as<float>());
    dev->update_rows(*dw, host.view, src.data(), slots.data(), static_cast<int64_t>(src.size()));
    dev->matmul(*dw, dx->as<float>(), 3, y_new.as<float>());
    sync();

    std::vector<int32_t> now = held;  // host row each slot holds after the update
    for (size_t j = 0; j < src.size(); ++j) now[slots[j]] = src[j];
    const auto got = rows_of(dev, *dw);
    for (int64_t s = 0; s < n_dev; ++s)
      ASSERT_EQ(device_row(got, *dw, s), host_row(host.view, now[s])) << "slot " << s;

    // Outputs: row by row, the matmul of the rows held at its place in the queue.
    const auto yo = from_device<float>(dev, y_old.as<void>(), static_cast<size_t>(3 * n_dev));
    const auto yn = from_device<float>(dev, y_new.as<void>(), static_cast<size_t>(3 * n_dev));
    std::vector<float> deq(static_cast<size_t>(cols));
    for (int64_t tok = 0; tok < 3; ++tok) {
      const float* xt = x.data() + tok * cols;
      const auto e = device_input_error(t, xt, cols);
      for (int64_t s = 0; s < n_dev; ++s) {
        for (const auto& [rows, y, when] :
             {std::tuple{&held, &yo, "before"}, std::tuple{&now, &yn, "after"}}) {
          quant::dequantize_row_ref(t, host.view.row((*rows)[s]), deq.data(), cols);
          const Dot d = dot(deq.data(), xt, cols);
          ASSERT_NEAR((*y)[tok * n_dev + s], d.value,
                      input_error_cost(deq.data(), e) + kDotUlps * kU * d.abs + 1e-30)
              << "matmul queued " << when << " update_rows: token " << tok << " slot " << s;
        }
      }
    }
    dev->free_weight(*dw);
  }
}

TEST_F(DeviceMemory, ProfileIsFiniteAndPositive) {
  const ops::DeviceProfile p = dev->profile();
  std::printf("%s: memory %.1f GB/s, link %.1f GB/s, op %.2f us, sync %.2f us, overhead %.0f MiB\n",
              dev->name().c_str(), p.mem_gbps, p.link_gbps, p.op_us, p.sync_us,
              static_cast<double>(dev->overhead_bytes()) / kMiB);
  EXPECT_FALSE(dev->name().empty());
  for (double v : {p.mem_gbps, p.link_gbps, p.op_us, p.sync_us}) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GE(v, 0.0);
  }
  EXPECT_GT(p.mem_gbps, 0.0);
  EXPECT_GT(p.sync_us, 0.0);
  EXPECT_LE(dev->charged_bytes(), dev->budget_bytes());
  EXPECT_LE(dev->overhead_bytes(), dev->charged_bytes());
}

TEST_F(DeviceMemory, KindIsTheOneOpened) {
  const std::string k = kDeviceKind;
  const ops::DeviceKind want = k == "cpu"      ? ops::DeviceKind::kCpu
                               : k == "vulkan" ? ops::DeviceKind::kVulkan
                                               : ops::DeviceKind::kCuda;
  EXPECT_EQ(dev->kind(), want) << dev->name();
}

}  // namespace
}  // namespace hc::device_test
