// Recorded steps (ops/device.h begin_record .. replay) on every device: a decode-like step whose
// inputs are copied in from pinned host buffers and whose position is read from device memory
// (DevicePos::dev) is recorded once and replayed at later positions; every replay gives the
// same bits as the same operations queued with host positions, and counts one command, one
// replayed step and its copies' bytes. A recording with a sync() inside is refused, and the
// device goes on working after it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

constexpr int kHeads = 2, kHeadsKv = 1, kHeadDim = 16, kCtx = 16;
constexpr int64_t kQ = kHeads * kHeadDim, kKv = kHeadsKv * kHeadDim;

class DeviceRecord : public DeviceTest {
 protected:
  // Pinned inputs and output of the step.
  struct Host {
    ops::Device* dev;
    float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
    int32_t* pos = nullptr;
    explicit Host(ops::Device* d) : dev(d) {
      q = alloc<float>(kQ), k = alloc<float>(kKv), v = alloc<float>(kKv);
      out = alloc<float>(kQ), pos = alloc<int32_t>(1);
    }
    ~Host() {
      for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                      static_cast<void*>(out), static_cast<void*>(pos)})
        dev->free_host(p);
    }
    template <class T>
    T* alloc(int64_t n) {
      auto r = dev->alloc_host(static_cast<uint64_t>(n) * sizeof(T));
      check(r.status(), "alloc_host");
      return static_cast<T*>(r.value());
    }
  };
  // One layer's device state: the token's q, k, v, the cache, the output, the position.
  struct Layer {
    DeviceBuffer q, k, v, kc, vc, out, pos;
    explicit Layer(ops::Device* d)
        : q(d, kQ * 4), k(d, kKv * 4), v(d, kKv * 4), kc(d, kCtx * kKv * 2),
          vc(d, kKv * kCtx * 2), out(d, kQ * 4), pos(d, 4) {
      const std::vector<uint8_t> zeros(kCtx * kKv * 2, 0);
      check(d->upload(kc.as<void>(), zeros.data(), zeros.size()), "upload");
      check(d->upload(vc.as<void>(), zeros.data(), zeros.size()), "upload");
    }
  };

  // The step's operations at position p: a host integer, or (at_device) read from L.pos.
  void queue_step(Layer& L, const Host& h, int p, bool at_device) {
    dev->copy_to_device(L.q.as<void>(), h.q, kQ * 4);
    dev->copy_to_device(L.k.as<void>(), h.k, kKv * 4);
    dev->copy_to_device(L.v.as<void>(), h.v, kKv * 4);
    dev->copy_to_device(L.pos.as<void>(), h.pos, 4);
    const ops::DevicePos pos = at_device ? ops::DevicePos(0, L.pos.as<int32_t>()) : p;
    const float ts = 0.75f;
    dev->rope(L.q.as<float>(), 1, kHeads, kHeadDim, kHeadDim, pos, ts, 1.0f, nullptr, false);
    dev->rope(L.k.as<float>(), 1, kHeadsKv, kHeadDim, kHeadDim, pos, ts, 1.0f, nullptr, false);
    dev->kv_store(L.k.as<float>(), L.v.as<float>(), 1, pos, kKv, kCtx, L.kc.as<fp16_t>(),
                  L.vc.as<fp16_t>());
    const ops::AttentionShape shape{kHeads, kHeadsKv, kHeadDim, kKv, kCtx};
    dev->attention(L.q.as<float>(), L.kc.as<fp16_t>(), L.vc.as<fp16_t>(), pos, 1, shape, 0.25f,
                   L.out.as<float>());
    dev->copy_to_host(h.out, L.out.as<void>(), kQ * 4);
  }
  static void fill(Host& h, int p) {
    const std::vector<float> q = randn(kQ, 10 + p), k = randn(kKv, 40 + p), v = randn(kKv, 70 + p);
    std::memcpy(h.q, q.data(), sizeof(float) * kQ);
    std::memcpy(h.k, k.data(), sizeof(float) * kKv);
    std::memcpy(h.v, v.data(), sizeof(float) * kKv);
    h.pos[0] = p;
  }
};

TEST_F(DeviceRecord, ReplaysGiveTheBitsOfQueuedStepsAtTheirDevicePositions) {
  ASSERT_TRUE(dev->can_record());
  Host h(dev), ref_h(dev);
  Layer rec(dev), ref(dev);
  int id = -1;
  for (int p = 0; p < 6; ++p) {
    fill(h, p);
    fill(ref_h, p);
    const ops::DeviceCounters c0 = dev->counters();
    if (p == 0) {
      dev->begin_record();
      queue_step(rec, h, p, /*at_device=*/true);
      auto r = dev->end_record();
      ASSERT_TRUE(r.ok()) << r.status().message();
      id = r.value();
    } else {
      dev->replay(id);
      const ops::DeviceCounters c = dev->counters() - c0;
      EXPECT_EQ(c.ops, 1u) << "a replay is one command";
      EXPECT_EQ(c.replayed, 1u);
      EXPECT_EQ(c.h2d_bytes, uint64_t{(kQ + 2 * kKv) * 4 + 4}) << "its copies' bytes, in";
      EXPECT_EQ(c.d2h_bytes, uint64_t{kQ * 4}) << "and out";
      EXPECT_EQ(c.syncs, 0u);
    }
    sync();
    const std::vector<float> got(h.out, h.out + kQ);
    queue_step(ref, ref_h, p, /*at_device=*/false);  // host positions, queued anew
    sync();
    const std::vector<float> want(ref_h.out, ref_h.out + kQ);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * kQ), 0)
        << "position " << p << ": got[0] " << got[0] << ", want[0] " << want[0];
  }
  // The caches hold the same six positions.
  EXPECT_EQ(from_device<uint16_t>(dev, rec.kc.as<void>(), kCtx * kKv),
            from_device<uint16_t>(dev, ref.kc.as<void>(), kCtx * kKv));
  EXPECT_EQ(from_device<uint16_t>(dev, rec.vc.as<void>(), kCtx * kKv),
            from_device<uint16_t>(dev, ref.vc.as<void>(), kCtx * kKv));
  dev->drop_record(id);
}

TEST_F(DeviceRecord, ARecordingWithASyncInsideIsRefusedAndTheDeviceGoesOn) {
  Host h(dev), ref_h(dev);
  Layer rec(dev), ref(dev);
  fill(h, 0);
  fill(ref_h, 0);
  {
    auto r = dev->end_record();
    EXPECT_FALSE(r.ok()) << "end_record without begin_record";
  }
  dev->begin_record();
  queue_step(rec, h, 0, /*at_device=*/true);
  (void)dev->sync();  // not allowed while recording: the recording is lost
  auto r = dev->end_record();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("replay"), std::string::npos) << r.status().message();
  (void)dev->sync();
  // Queued again, the step gives the reference's bits.
  queue_step(rec, h, 0, /*at_device=*/true);
  sync();
  queue_step(ref, ref_h, 0, /*at_device=*/false);
  sync();
  EXPECT_EQ(std::memcmp(h.out, ref_h.out, sizeof(float) * kQ), 0);
}

}  // namespace
}  // namespace hc::device_test
