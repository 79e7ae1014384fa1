// What a device session charges on the Vulkan device (lavapipe in CI), which has operation
// scratch of its own (quantised activations, an FFN's h) as a GPU has: after
// DeviceSession::create the device holds exactly the placement's weights, the KV cache and
// DeviceSession::scratch_bytes(dm) (its buffers and the reserved operation scratch), running the
// model charges nothing more, the planners' estimate (scratch_bytes from the model alone) is
// never below it and equals it where it assumes nothing (every neuron of a layer hot), and a
// placement with nothing on the device charges nothing at all.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../model/batched_steps.h"
#include "../model/tiny_model.h"
#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/sparse_ffn.h"
#include "ops/device.h"
#include "vulkan_test_util.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

struct Case {
  const char* name;
  int ngl;
  bool attn;
  int hot_step;  // neurons i % hot_step == 0 of every layer on the device; 0 = none
  bool planner_exact;  // the planners' estimate for these flags is exact
};

// Three ReLU layers, wide enough for the decode layouts.
TinyModelSpec relu_spec(GgmlType t) {
  TinyModelSpec spec;
  spec.wtype = t;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_layer = 3;
  spec.activation = "relu";
  return spec;
}

TEST(VulkanSession, ChargesExactlyWhatItPredictsAndNothingMoreWhileItRuns) {
  REQUIRE_VULKAN();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::F16}) {
    TinyModel tm(relu_spec(t));
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, /*repack=*/true);
    ASSERT_TRUE(m);
    SparseOptions so;
    so.max_union_share = 1.0;
    auto sparse = SparseFfn::build(*m, so);
    ASSERT_TRUE(sparse.ok()) << sparse.message();
    const LlamaHParams& hp = m->hparams();
    const Case cases[] = {
        {"-ngl 99", 99, false, 0, true},
        {"-ngl 1", 1, false, 0, true},
        {"attention + every neuron", 0, true, 1, true},
        {"attention + even neurons", 0, true, 2, false},
        {"even neurons only", 0, false, 2, false},
        {"nothing", 0, false, 0, true},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.name);
      auto dev = ops::vk_test::open_device0();  // fresh: no scratch yet
      ASSERT_TRUE(dev);
      DevicePlacement p;
      p.n_gpu_layers = c.ngl;
      if (c.attn) p.attn.assign(static_cast<size_t>(hp.n_layer), 1);
      if (c.hot_step > 0) {
        p.hot.resize(static_cast<size_t>(hp.n_layer));
        for (auto& h : p.hot)
          for (int32_t i = 0; i < hp.n_ff; i += c.hot_step) h.push_back(i);
      }
      const bool sparse_run = c.hot_step > 0;
      auto dm = DeviceModel::build(*m, sparse_run ? sparse->get() : nullptr, dev, p);
      ASSERT_TRUE(dm.ok()) << dm.message();
      const uint64_t weights = dev->charged_bytes();
      EXPECT_EQ(weights, (*dm)->weight_bytes());
      const int n_ctx = 32;
      auto ds = DeviceSession::create(**dm, n_ctx, kForwardUbatch);
      ASSERT_TRUE(ds.ok()) << ds.message();
      const uint64_t scratch = DeviceSession::scratch_bytes(**dm, kForwardUbatch);
      const uint64_t session = dev->charged_bytes() - weights;
      EXPECT_EQ(session, (*ds)->kv_bytes() + scratch);
      const bool on_device = c.ngl > 0 || c.attn || c.hot_step > 0;
      if (on_device) {
        EXPECT_GT(scratch, 0u);
      } else {
        EXPECT_EQ(session, 0u);
      }
      // The planners' estimate from the model and the kinds of things placed.
      const bool any_attn = c.attn || c.ngl > 0, dense = c.ngl > 0, hot = c.hot_step > 0;
      const bool output = c.ngl > hp.n_layer;
      const uint64_t planned = DeviceSession::scratch_bytes(*dev, *m, kForwardUbatch, any_attn,
                                                            dense, hot, output);
      EXPECT_GE(planned, scratch);
      if (c.planner_exact) {
        EXPECT_EQ(planned, scratch);
      }
      // Running a prompt and a few decode steps charges nothing more.
      KvCache cache(hp.n_layer, n_ctx, int64_t{hp.n_head_kv} * hp.head_dim);
      ForwardScratch s;
      s.sparse = sparse_run ? sparse->get() : nullptr;
      s.device = ds->get();
      ThreadPool pool(2);
      const std::vector<int32_t> toks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18};
      std::vector<float> logits;
      Status st = llama_forward(*m, cache, s, pool, std::span(toks.data(), 9), 0, true, &logits);
      ASSERT_TRUE(st.ok()) << st.message();
      for (int i = 9; i < static_cast<int>(toks.size()); ++i) {
        st = llama_forward(*m, cache, s, pool, std::span(&toks[i], 1), i, false, &logits);
        ASSERT_TRUE(st.ok()) << st.message();
      }
      EXPECT_EQ(dev->charged_bytes(), weights + session);
    }
  }
}

// The server's prompt store on Vulkan: a session's device KV copied into a host cache and into
// a fresh session lets the fresh one decode exactly as the first goes on (same device, same
// operations); the copies are byte-exact both ways.
TEST(VulkanSession, DeviceKvRoundTripsThroughAHostCache) {
  REQUIRE_VULKAN();
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q4_0;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_layer = 3;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, /*repack=*/true);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  auto dev = ops::vk_test::open_device0();
  ASSERT_TRUE(dev);
  DevicePlacement p;
  p.n_gpu_layers = 2;
  auto dm = DeviceModel::build(*m, nullptr, dev, p);
  ASSERT_TRUE(dm.ok()) << dm.message();
  constexpr int kCtx = 32, kPrompt = 9;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  const std::vector<int32_t> toks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18, 2, 8};
  ThreadPool pool(2);
  auto a = DeviceSession::create(**dm, kCtx, kForwardUbatch);
  auto b = DeviceSession::create(**dm, kCtx, kForwardUbatch);
  ASSERT_TRUE(a.ok() && b.ok());
  KvCache ca(hp.n_layer, kCtx, kv_dim);
  ForwardScratch sa, sb;
  sa.device = a->get();
  sb.device = b->get();
  std::vector<float> la, lb;
  ASSERT_TRUE(llama_forward(*m, ca, sa, pool, std::span(toks.data(), kPrompt), 0, false, &la).ok());
  ASSERT_TRUE((*a)->kv_to_host(ca, kPrompt).ok());
  KvCache cb = ca;
  ASSERT_TRUE((*b)->kv_from_host(cb, kPrompt).ok());
  KvCache back(hp.n_layer, kCtx, kv_dim);
  ASSERT_TRUE((*b)->kv_to_host(back, kPrompt).ok());
  for (int il = 1; il < hp.n_layer; ++il) {  // the device layers: what went in comes back
    ASSERT_EQ(0, std::memcmp(back.k_at(il, 0), ca.k_at(il, 0), kPrompt * kv_dim * sizeof(fp16_t)));
    ASSERT_EQ(0, std::memcmp(back.v_row(il, 0), ca.v_row(il, 0), kCtx * kv_dim * sizeof(fp16_t)));
  }
  for (int i = kPrompt; i < static_cast<int>(toks.size()); ++i) {
    ASSERT_TRUE(llama_forward(*m, ca, sa, pool, std::span(&toks[i], 1), i, false, &la).ok());
    ASSERT_TRUE(llama_forward(*m, cb, sb, pool, std::span(&toks[i], 1), i, false, &lb).ok());
    ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "pos " << i;
  }
}

// The server's batched hybrid decode on Vulkan: a llama_forward_multi pass of several
// sequences' decode steps, each with its own session, gives every sequence the logits of its
// own one-token decode bit for bit (the device's operations queued per row: one-row matmuls and
// FFN calls, attention per step), for 3 and 9 sequences (9: a batched Vulkan matmul would switch
// kernels), with -ngl (the output too) and with hot neurons (thresholds) beside host attention,
// for three weight types. Vulkan queues each batch as one call (its mat-vec and FFN are per
// row already): this is the test that holds that.
TEST(VulkanSession, BatchedDecodeStepsEqualEachSequenceAlone) {
  REQUIRE_VULKAN();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    TinyModel tm(relu_spec(t));
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, /*repack=*/true);
    ASSERT_TRUE(m);
    const LlamaHParams& hp = m->hparams();
    SparseOptions so;
    so.max_union_share = 1.0;
    auto sparse = SparseFfn::build(*m, so);
    ASSERT_TRUE(sparse.ok()) << sparse.message();
    for (bool hot : {false, true}) {
      SCOPED_TRACE(hot ? "hot neurons" : "-ngl 99");
      auto dev = ops::vk_test::open_device0();
      ASSERT_TRUE(dev);
      DevicePlacement p;
      if (hot) {
        p.hot.resize(static_cast<size_t>(hp.n_layer));
        for (auto& h : p.hot)
          for (int32_t i = 0; i < hp.n_ff; i += 2) h.push_back(i);
        p.attn = {0, 1, 0};
      } else {
        p.n_gpu_layers = 99;
      }
      const SparseFfn* sp = hot ? sparse->get() : nullptr;
      auto dm = DeviceModel::build(*m, sp, dev, p);
      ASSERT_TRUE(dm.ok()) << dm.message();
      for (int n_seq : {3, 9})
        testing::expect_batched_steps_equal_alone(*m, **dm, sp, n_seq, 2,
                                                  std::string(dtype_name(t)) +
                                                      (hot ? " hot neurons" : " -ngl 99"));
    }
  }
}

}  // namespace
}  // namespace hc
