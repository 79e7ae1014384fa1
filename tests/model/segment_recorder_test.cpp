// The split pass's segment recorder (model/segment_recorder.h) on the CPU device: a pass of
// copies and adds, cut into two segments, is recorded at the first pass and replayed after
// (one command and one replayed step per pass, the copies' bytes still counted), with results
// that follow each pass's new host input; an operation that differs from the recording (an
// argument, a segment that ends early) is queued anew and recorded again, with the right
// results; a segment that differs kMaxMisses passes in a row is queued directly from then on;
// outside a pass every operation goes straight to the device. The forward pass's use of it is
// held by the split budgets (tests/app/device_budgets.h) on the CPU device and on lavapipe.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/segment_recorder.h"
#include "tiny_model.h"

namespace hc {
namespace {

constexpr int64_t kN = 64;

class SegmentRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = testing::cpu_device();
    ASSERT_TRUE(dev_);
    auto a = dev_->alloc(kN * 4, "x"), b = dev_->alloc(kN * 4, "y");
    auto h = dev_->alloc_host(kN * 4), o = dev_->alloc_host(kN * 4);
    ASSERT_TRUE(a.ok() && b.ok() && h.ok() && o.ok());
    x_ = static_cast<float*>(*a), y_ = static_cast<float*>(*b);
    hin_ = static_cast<float*>(*h), hout_ = static_cast<float*>(*o);
    const std::vector<float> zeros(kN, 0.0f);
    ASSERT_TRUE(dev_->upload(y_, zeros.data(), kN * 4).ok());
    rec_ = std::make_unique<SegmentRecorder>(*dev_);
  }
  void TearDown() override {
    rec_.reset();
    dev_->free(x_), dev_->free(y_), dev_->free_host(hin_), dev_->free_host(hout_);
  }

  // One pass: x = the host's input (value v everywhere), y += x (all, or the first `second`
  // elements in the second segment), y back to the host. The model of y is kept alongside.
  void pass(float v, int64_t second = kN, bool copy_back = true) {
    for (int64_t i = 0; i < kN; ++i) hin_[i] = v + static_cast<float>(i);
    rec_->begin_pass();
    ops::Device& d = *rec_;
    d.copy_to_device(x_, hin_, kN * 4);
    d.add(y_, x_, kN);
    rec_->cut();
    d.add(y_, x_, second);
    if (copy_back) d.copy_to_host(hout_, y_, kN * 4);
    ASSERT_TRUE(d.sync().ok());
    rec_->end_pass();
    for (int64_t i = 0; i < kN; ++i) want_[i] += hin_[i] * (i < second ? 2.0f : 1.0f);
    if (!copy_back) {
      ASSERT_TRUE(dev_->download(hout_, y_, kN * 4).ok());
    }
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hout_[i], want_[i]) << "element " << i;
  }

  std::shared_ptr<ops::Device> dev_;
  std::unique_ptr<SegmentRecorder> rec_;
  float *x_ = nullptr, *y_ = nullptr, *hin_ = nullptr, *hout_ = nullptr;
  std::vector<float> want_ = std::vector<float>(kN, 0.0f);
};

TEST_F(SegmentRecorderTest, RecordsTheFirstPassAndReplaysTheNext) {
  pass(1);
  EXPECT_EQ(rec_->stats().recorded, 2u);  // the cut and the sync end the two segments
  EXPECT_EQ(rec_->stats().replayed, 0u);
  const ops::DeviceCounters before = dev_->counters();
  for (int t = 0; t < 4; ++t) pass(10.0f * static_cast<float>(t + 2));  // new input each pass
  const ops::DeviceCounters d = dev_->counters() - before;
  EXPECT_EQ(rec_->stats().replayed, 8u);
  EXPECT_EQ(rec_->stats().misses, 0u);
  EXPECT_EQ(d.ops, 4u * 2) << "one command per segment";
  EXPECT_EQ(d.replayed, 4u) << "one replayed step per pass, not per segment";
  EXPECT_EQ(d.syncs, 4u);
  EXPECT_EQ(d.h2d_bytes, 4u * kN * 4) << "a replay counts its copies' bytes";
  EXPECT_EQ(d.d2h_bytes, 4u * kN * 4);
}

TEST_F(SegmentRecorderTest, AnOperationThatDiffersIsQueuedAnewAndRecordedAgain) {
  pass(1);
  pass(2);
  pass(3, kN / 2);  // the second segment's add covers half: recorded again
  EXPECT_EQ(rec_->stats().misses, 1u);
  EXPECT_EQ(rec_->stats().recorded, 3u);
  pass(4, kN / 2);  // the new recording replays
  EXPECT_EQ(rec_->stats().misses, 1u);
  EXPECT_EQ(rec_->stats().replayed, 2u + 1u + 2u);  // pass 3 replayed its first segment
  pass(5, kN / 2, /*copy_back=*/false);  // the segment ends before its recording does
  EXPECT_EQ(rec_->stats().misses, 2u);
  pass(6, kN / 2, false);
  EXPECT_EQ(rec_->stats().misses, 2u);
}

TEST_F(SegmentRecorderTest, ASegmentThatKeepsDifferingIsQueuedDirectly) {
  pass(1);
  for (int t = 0; t < SegmentRecorder::kMaxMisses; ++t)
    pass(static_cast<float>(t + 2), t % 2 ? kN : kN / 2);  // differs every pass
  EXPECT_EQ(rec_->stats().misses, static_cast<uint64_t>(SegmentRecorder::kMaxMisses));
  const ops::DeviceCounters before = dev_->counters();
  const uint64_t direct = rec_->stats().direct;
  pass(20);
  pass(21, kN / 2);
  const ops::DeviceCounters d = dev_->counters() - before;
  EXPECT_EQ(rec_->stats().direct, direct + 2);
  EXPECT_EQ(d.ops, 2u * (1 + 2)) << "the first segment replayed, the second's two ops queued";
  EXPECT_EQ(d.replayed, 2u);
}

TEST_F(SegmentRecorderTest, OutsideAPassOperationsGoStraightToTheDevice) {
  for (int64_t i = 0; i < kN; ++i) hin_[i] = static_cast<float>(i);
  const ops::DeviceCounters before = dev_->counters();
  ops::Device& d = *rec_;
  for (int t = 0; t < 3; ++t) {
    d.copy_to_device(x_, hin_, kN * 4);
    d.add(y_, x_, kN);
    ASSERT_TRUE(d.sync().ok());
  }
  const ops::DeviceCounters c = dev_->counters() - before;
  EXPECT_EQ(c.ops, 6u);
  EXPECT_EQ(c.replayed, 0u);
  EXPECT_EQ(rec_->stats().recorded + rec_->stats().replayed, 0u);
  std::vector<float> y(kN);
  ASSERT_TRUE(dev_->download(y.data(), y_, kN * 4).ok());
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(y[i], 3.0f * static_cast<float>(i));
}

}  // namespace
}  // namespace hc
