#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

std::shared_ptr<const LlamaModel> load(std::vector<uint8_t>& bytes, bool repack = false) {
  return testing::load_tiny(bytes, repack);
}

// Logits for every position, computed one token at a time.
std::vector<float> decode_one_by_one(const LlamaModel& m, const std::vector<int32_t>& toks, int nt) {
  KvCache cache(m.hparams().n_layer, 64, int64_t{m.hparams().n_head_kv} * m.hparams().head_dim);
  ForwardScratch s;
  ThreadPool pool(nt);
  std::vector<float> all, l;
  for (size_t i = 0; i < toks.size(); ++i) {
    EXPECT_TRUE(llama_forward(m, cache, s, pool, std::span(&toks[i], 1), static_cast<int>(i), false, &l).ok());
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

class ForwardTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(ForwardTypes, BatchedPrefillEqualsTokenByTokenDecode) {
  TinyModelSpec spec;
  spec.wtype = GetParam();
  spec.n_embd = 256;  // K-quants need rows of 256
  spec.n_ff = 256;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  const std::vector<int32_t> toks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18};
  const auto ref = decode_one_by_one(*m, toks, 1);
  KvCache cache(m->hparams().n_layer, 64, int64_t{m->hparams().n_head_kv} * m->hparams().head_dim);
  ForwardScratch s;
  ThreadPool pool(2);
  std::vector<float> logits;
  ASSERT_TRUE(llama_forward(*m, cache, s, pool, toks, 0, true, &logits).ok());
  ASSERT_EQ(logits.size(), ref.size());
  float max_abs = 0;
  for (float v : ref) max_abs = std::max(max_abs, std::fabs(v));
  // Not bit-equal: a batch runs the packed GEMM and blocked attention (other float summation
  // orders) where a single token runs per-row dot products, as llama.cpp's batch (tinyBLAS) and
  // single-token (vec_dot) paths differ. Float weights: last-bit differences, amplified by this
  // deliberately sharp tiny model (unit-scale weights) to ~1e-4 of the logit range. Quantised
  // weights: a last-bit difference can also move an activation across a Q8 rounding boundary,
  // one level = 1/127 of its block's max, which this model amplifies to ~1-3% of the range (Q4_K
  // and Q6_K measured 2.6%, with the GEMM itself within 3e-7 of the per-row reference). A
  // wiring error (position, mask, head, row) moves logits by O(range).
  const bool float_w = GetParam() == GgmlType::F32 || GetParam() == GgmlType::F16;
  const float rel = float_w ? 1e-3f : 5e-2f;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(logits[i], ref[i], rel * (1 + max_abs)) << dtype_name(GetParam()) << " at " << i;
}

// The decode layout (ops/cpu/repack.h), tied embeddings included: token-by-token logits equal
// the file layout's bit for bit for Q8_0 / Q4_1 (ggml's order is kept) and within the batched
// test's bound for the others (Q4_0 / Q4_K / F16 sum in another order).
TEST_P(ForwardTypes, RepackedWeightsDecodeLikeTheFileLayout) {
  for (bool tied : {false, true}) {
    TinyModelSpec spec;
    spec.wtype = GetParam();
    spec.n_embd = 256;
    spec.n_ff = 256;
    spec.tied = tied;
    TinyModel tm(spec);
    auto bytes = tm.bytes();
    auto plain = load(bytes, false);
    auto packed = load(bytes, true);
    ASSERT_TRUE(plain && packed);
    const bool has_layout = packed->repacked_bytes() > 0;
    if (!has_layout) continue;  // a type without a layout, or a CPU without AVX-512 VNNI
    EXPECT_EQ(packed->weights().output.packed != nullptr, true);
    EXPECT_EQ(packed->weights().token_embd.packed != nullptr, tied);
    const std::vector<int32_t> toks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18};
    const auto a = decode_one_by_one(*plain, toks, 2);
    const auto b = decode_one_by_one(*packed, toks, 2);
    ASSERT_EQ(a.size(), b.size());
    const bool exact = GetParam() == GgmlType::Q8_0 || GetParam() == GgmlType::Q4_1;
    float max_abs = 0;
    for (float v : a) max_abs = std::max(max_abs, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i) {
      if (exact) ASSERT_EQ(a[i], b[i]) << dtype_name(GetParam()) << " tied " << tied << " at " << i;
      else ASSERT_NEAR(a[i], b[i], 5e-2f * (1 + max_abs)) << dtype_name(GetParam()) << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ForwardTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K,
                                           GgmlType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A call longer than kForwardUbatch runs in micro-batches: the same bits as the caller making
// the calls itself at the same boundaries, with all-logits rows in order, and with last-token
// logits only (the earlier micro-batches skip the output matmul).
TEST(Forward, LongCallsRunInMicroBatches) {
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q8_0;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  const int64_t n = 2 * kForwardUbatch + 44;
  std::vector<int32_t> toks(n);
  for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>(1 + (i * 7) % (spec.n_vocab - 1));
  const int64_t kv_dim = int64_t{m->hparams().n_head_kv} * m->hparams().head_dim;
  const int64_t nv = m->hparams().n_vocab;
  ThreadPool pool(2);
  KvCache c1(m->hparams().n_layer, 512, kv_dim), c2(m->hparams().n_layer, 512, kv_dim),
      c3(m->hparams().n_layer, 512, kv_dim);
  ForwardScratch s1, s2, s3;
  std::vector<float> whole, last, part, parts;
  ASSERT_TRUE(llama_forward(*m, c1, s1, pool, toks, 0, true, &whole).ok());
  ASSERT_EQ(whole.size(), static_cast<size_t>(n * nv));
  for (int64_t b = 0; b < n; b += kForwardUbatch) {
    const int64_t len = std::min<int64_t>(kForwardUbatch, n - b);
    ASSERT_TRUE(llama_forward(*m, c2, s2, pool, std::span(toks).subspan(b, len), static_cast<int>(b), true, &part).ok());
    parts.insert(parts.end(), part.begin(), part.end());
  }
  ASSERT_EQ(whole, parts);
  ASSERT_TRUE(llama_forward(*m, c3, s3, pool, toks, 0, false, &last).ok());
  ASSERT_EQ(last.size(), static_cast<size_t>(nv));
  KvCache c4(m->hparams().n_layer, 512, kv_dim);
  ForwardScratch s4;
  for (int64_t b = 0; b < n; b += kForwardUbatch) {
    const int64_t len = std::min<int64_t>(kForwardUbatch, n - b);
    ASSERT_TRUE(llama_forward(*m, c4, s4, pool, std::span(toks).subspan(b, len), static_cast<int>(b), false, &part).ok());
  }
  ASSERT_EQ(last, part);
}

TEST(Forward, ReluModelsUseReglu) {
  TinyModelSpec a, b;
  b.activation = "relu";
  TinyModel ta(a), tb(b);  // same seed: identical weights, different activation
  auto ba = ta.bytes(), bb = tb.bytes();
  auto ma = load(ba), mb = load(bb);
  ASSERT_TRUE(ma && mb);
  EXPECT_EQ(ma->hparams().ffn_act, FfnActivation::kSilu);
  EXPECT_EQ(mb->hparams().ffn_act, FfnActivation::kRelu);
  const auto la = decode_one_by_one(*ma, {1, 4, 5}, 1), lb = decode_one_by_one(*mb, {1, 4, 5}, 1);
  double diff = 0;
  for (size_t i = 0; i < la.size(); ++i) diff += std::fabs(la[i] - lb[i]);
  EXPECT_GT(diff, 1e-3);
}

// dReLU (relu(gate) * relu(up)) and where each activation comes from: our metadata key, the
// bamboo architecture (PowerInfer's dReLU), a PowerInfer "PWRI" llama file (ReGLU whatever its
// name), the model name of a plain llama GGUF, else SiLU.
TEST(Forward, ActivationFollowsMetadataArchitecturePowerInferAndName) {
  TinyModelSpec spec;
  auto activation_of = [&](const std::string& arch, const std::string& key_value,
                           const std::string& name, bool pwri, Status* err = nullptr)
      -> std::pair<FfnActivation, std::vector<float>> {
    TinyModel tm(spec);  // same seed: identical weights every time
    GgufWriter& w = tm.writer();
    if (!key_value.empty()) w.set("hotcold.ffn_activation", GgufValue::str(key_value));
    if (!name.empty()) w.set("general.name", GgufValue::str(name));
    if (arch != "llama") {
      w.set("general.architecture", GgufValue::str(arch));
      const std::string a = arch + ".";
      w.set(a + "context_length", GgufValue::u32(spec.n_ctx));
      w.set(a + "embedding_length", GgufValue::u32(spec.n_embd));
      w.set(a + "block_count", GgufValue::u32(spec.n_layer));
      w.set(a + "feed_forward_length", GgufValue::u32(spec.n_ff));
      w.set(a + "attention.head_count", GgufValue::u32(spec.n_head));
      w.set(a + "attention.head_count_kv", GgufValue::u32(spec.n_head_kv));
      w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
    }
    auto bytes = tm.bytes();
    if (pwri) std::memcpy(bytes.data(), "PWRI", 4);
    auto f = parse_gguf(bytes);
    EXPECT_TRUE(f.ok()) << f.message();
    auto m = LlamaModel::from_gguf(std::move(f).value());
    if (err) *err = m.status();
    if (!m.ok()) return {FfnActivation::kSilu, {}};
    return {(*m)->hparams().ffn_act, decode_one_by_one(**m, {1, 4, 5}, 1)};
  };
  const auto silu = activation_of("llama", "", "", false);
  const auto relu = activation_of("llama", "relu", "", false);
  const auto drelu = activation_of("llama", "drelu", "", false);
  EXPECT_EQ(silu.first, FfnActivation::kSilu);
  EXPECT_EQ(relu.first, FfnActivation::kRelu);
  EXPECT_EQ(drelu.first, FfnActivation::kDRelu);
  // Three different functions of the same weights.
  auto l1 = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::fabs(a[i] - b[i]);
    return d;
  };
  EXPECT_GT(l1(drelu.second, relu.second), 1e-3);
  EXPECT_GT(l1(drelu.second, silu.second), 1e-3);
  // bamboo is dReLU: the very same logits as the key says.
  const auto bamboo = activation_of("bamboo", "", "", false);
  EXPECT_EQ(bamboo.first, FfnActivation::kDRelu);
  EXPECT_EQ(bamboo.second, drelu.second);
  EXPECT_EQ(activation_of("bamboo", "", "", true).first, FfnActivation::kDRelu);
  // A PWRI llama file is ReGLU, whatever its name; the same bytes as GGUF are SiLU.
  const auto pwri = activation_of("llama", "", "Llama-2-7b-chat", true);
  EXPECT_EQ(pwri.first, FfnActivation::kRelu);
  EXPECT_EQ(pwri.second, relu.second);
  EXPECT_EQ(activation_of("llama", "", "Llama-2-7b-chat", false).first, FfnActivation::kSilu);
  // Plain llama GGUF of a ReLU-family checkpoint: its name.
  EXPECT_EQ(activation_of("llama", "", "TurboSparse-Mistral-7B", false).first,
            FfnActivation::kDRelu);
  EXPECT_EQ(activation_of("llama", "", "Bamboo-7B-base", false).first, FfnActivation::kDRelu);
  EXPECT_EQ(activation_of("llama", "", "ReluLLaMA-7B", false).first, FfnActivation::kRelu);
  EXPECT_EQ(activation_of("llama", "", "ProSparse-LLaMA-2-13B", false).first,
            FfnActivation::kRelu);
  // The key wins over everything; a value it does not know is an error naming the choices.
  EXPECT_EQ(activation_of("bamboo", "silu", "", true).first, FfnActivation::kSilu);
  Status err = Status::Ok();
  activation_of("llama", "gelu", "", false, &err);
  EXPECT_FALSE(err.ok());
  EXPECT_NE(err.message().find("'drelu'"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("'gelu'"), std::string::npos) << err.message();
}

TEST(Forward, TiedOutputUsesEmbeddings) {
  TinyModelSpec s;
  s.tied = true;
  TinyModel tm(s);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->weights().output.data, m->weights().token_embd.data);
}

TEST(Forward, ContextOverflowAndBadTokensAreErrors) {
  TinyModel tm({});
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  KvCache cache(m->hparams().n_layer, 4, int64_t{m->hparams().n_head_kv} * m->hparams().head_dim);
  ForwardScratch s;
  ThreadPool pool(1);
  std::vector<float> l;
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  Status st = llama_forward(*m, cache, s, pool, five, 0, false, &l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("context overflow"), std::string::npos);
  const std::vector<int32_t> bad = {1, 999};
  st = llama_forward(*m, cache, s, pool, bad, 0, false, &l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("token id 999 out of range"), std::string::npos);
}

TEST(ModelLoad, WrongShapeAndUnsupportedTypeNameTheTensor) {
  {
    TinyModel tm({});
    auto& w = tm.writer();
    for (auto& t : w.tensors)
      if (t.name == "blk.1.ffn_up.weight") t.type = GgmlType::Q2_K, t.ne = {256, 21},
                                           t.data = t.data.subspan(0, 21 * 84);
    auto bytes = *w.serialize();
    auto f = parse_gguf(bytes);
    ASSERT_TRUE(f.ok()) << f.message();
    auto m = LlamaModel::from_gguf(std::move(f).value());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("blk.1.ffn_up.weight"), std::string::npos) << m.message();
  }
  {
    TinyModelSpec s;
    s.n_embd = 256;
    s.n_ff = 256;
    s.wtype = GgmlType::Q8_0;
    TinyModel tm(s);
    auto& w = tm.writer();
    for (auto& t : w.tensors)
      if (t.name == "blk.0.attn_k.weight") t.type = GgmlType::Q2_K, t.data = t.data.subspan(0, 128 * 84);
    auto bytes = w.serialize();
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    auto f = parse_gguf(*bytes);
    ASSERT_TRUE(f.ok()) << f.message();
    auto m = LlamaModel::from_gguf(std::move(f).value());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("'blk.0.attn_k.weight' has type Q2_K"), std::string::npos) << m.message();
  }
}

}  // namespace
}  // namespace hc
