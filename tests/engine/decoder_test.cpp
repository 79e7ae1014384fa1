// Greedy decoding through Session::eval_argmax and the Decoder (engine/decoder.h): the id is the
// argmax of the logits eval() gives, on the host and with the output layer on the CPU device
// (where only the id comes back: 4 bytes per eval), over prompts longer than a batch; a
// Decoder with a greedy sampler picks the tokens sampling the logits picks, and one with a
// penalty (not a plain argmax) keeps the logits.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "../model/tiny_model.h"
#include "engine/decoder.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/device_model.h"
#include "ops/cpu/ops.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

std::shared_ptr<const LlamaModel> tiny(std::vector<uint8_t>* bytes) {
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q8_0;
  spec.n_embd = 64;
  spec.n_ff = 128;
  spec.n_layer = 2;
  spec.n_vocab = 300;
  spec.n_ctx = 64;
  *bytes = TinyModel(spec).bytes();
  return testing::load_tiny(*bytes, /*repack=*/true);
}

SessionParams params() {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_threads = 2;
  sp.n_batch = 4;  // prompts of 11 tokens run in three chunks
  return sp;
}

const std::vector<int32_t> kPrompt = {1, 17, 250, 3, 99, 4, 42, 7, 123, 5, 8};

TEST(EvalArgmax, IsTheArgmaxOfTheLogitsOnTheHostAndWithTheOutputOnADevice) {
  std::vector<uint8_t> bytes;
  auto m = tiny(&bytes);
  ASSERT_TRUE(m);
  auto dev = testing::cpu_device();
  DevicePlacement p;
  p.n_gpu_layers = 99;  // every layer and the output
  auto dm = DeviceModel::build(*m, nullptr, dev, p);
  ASSERT_TRUE(dm.ok()) << dm.message();
  std::shared_ptr<const DeviceModel> placed(std::move(*dm));
  ASSERT_TRUE(placed->output_on_device());

  Session ref(m, params()), host(m, params()), offload(m, params());
  ASSERT_TRUE(offload.set_device(placed).ok());
  ASSERT_TRUE(ref.eval(kPrompt).ok());
  auto h = host.eval_argmax(kPrompt);
  auto o = offload.eval_argmax(kPrompt);
  ASSERT_TRUE(h.ok() && o.ok());
  std::vector<int32_t> want, got_host, got_dev;
  for (int step = 0; step < 12; ++step) {
    const int32_t w = ops::argmax_row(ref.logits().data(), static_cast<int64_t>(ref.logits().size()));
    want.push_back(w);
    got_host.push_back(*h);
    got_dev.push_back(*o);
    EXPECT_FALSE(host.logits().empty());
    EXPECT_TRUE(offload.logits().empty()) << "the logits stay on the device";
    const int32_t one[1] = {w};
    ASSERT_TRUE(ref.eval(one).ok());
    const ops::DeviceCounters before = dev->counters();
    h = host.eval_argmax(one);
    o = offload.eval_argmax(one);
    ASSERT_TRUE(h.ok() && o.ok());
    const ops::DeviceCounters d = dev->counters() - before;
    EXPECT_EQ(d.d2h_bytes, 4u);
    EXPECT_EQ(d.syncs, 1u);
  }
  EXPECT_EQ(got_host, want);
  EXPECT_EQ(got_dev, want);
  EXPECT_EQ(host.n_past(), ref.n_past());
  EXPECT_EQ(offload.history(), ref.history());
}

TEST(Decoder, GreedyPicksWhatSamplingTheLogitsPicksAndPenaltiesKeepTheLogits) {
  std::vector<uint8_t> bytes;
  auto m = tiny(&bytes);
  ASSERT_TRUE(m);
  SamplerParams greedy;
  greedy.temp = 0;
  SamplerParams penalised = greedy;
  penalised.repeat_penalty = 1.3f;
  for (const SamplerParams& sp : {greedy, penalised}) {
    Sampler by_logits(sp), by_decoder(sp);
    Session a(m, params()), b(m, params());
    Decoder d(b, by_decoder);
    EXPECT_EQ(d.ids_only(), sp.repeat_penalty == 1.0f);
    ASSERT_TRUE(a.eval(kPrompt).ok());
    ASSERT_TRUE(d.eval(kPrompt).ok());
    for (int step = 0; step < 16; ++step) {
      const int32_t want = by_logits.sample(a.logits(), a.history());
      ASSERT_EQ(d.next(), want) << "step " << step << ", penalty " << sp.repeat_penalty;
      const int32_t one[1] = {want};
      ASSERT_TRUE(a.eval(one).ok());
      ASSERT_TRUE(d.eval(one).ok());
    }
    if (!d.ids_only()) {
      EXPECT_EQ(b.logits(), a.logits());
    }
  }
}

}  // namespace
}  // namespace hc
