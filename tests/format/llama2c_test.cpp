#include "format/llama2c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/mmap.h"
#include "format/gguf.h"

namespace hc {
namespace {

const char* kStoriesBin = "../shared/models/stories260K/stories260K.bin";
const char* kStoriesTok = "../shared/models/stories260K/tok512.bin";

std::vector<uint8_t> read_all(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void put_i32(std::vector<uint8_t>* b, int32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + 4);
}
void put_f32(std::vector<uint8_t>* b, float v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + 4);
}

// A tiny synthetic checkpoint whose i-th payload float equals i, so every tensor's first
// value names its offset in the file.
struct Tiny {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 4, kv_heads = 2, vocab = 5, seq = 4;
  bool shared = true;
  int64_t payload_floats() const {
    const int64_t kv = dim / heads * kv_heads;
    int64_t n = int64_t{vocab} * dim + layers * dim + layers * dim * dim + 2 * layers * kv * dim +
                layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim +
                seq * (dim / heads);
    if (!shared) n += int64_t{vocab} * dim;
    return n;
  }
  std::vector<uint8_t> model() const {
    std::vector<uint8_t> b;
    for (int32_t v : {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq}) {
      put_i32(&b, v);
    }
    for (int64_t i = 0; i < payload_floats(); ++i) put_f32(&b, static_cast<float>(i));
    return b;
  }
  std::vector<uint8_t> tokenizer() const {
    const char* texts[] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x41>", " hi there"};
    std::vector<uint8_t> b;
    put_i32(&b, 9);
    for (int i = 0; i < vocab; ++i) {
      put_f32(&b, -static_cast<float>(i));
      const int32_t len = static_cast<int32_t>(std::strlen(texts[i]));
      put_i32(&b, len);
      b.insert(b.end(), texts[i], texts[i] + len);
    }
    return b;
  }
};

float first_value(const ConvertedModel& m, const std::string& name) {
  const ConvertedTensor* t = m.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? m.tensor_data(*t)[0] : -1.0f;
}

TEST(Llama2c, Stories260KMetadataAndShapes) {
  const std::vector<uint8_t> model = read_all(kStoriesBin);
  const std::vector<uint8_t> tok = read_all(kStoriesTok);
  ASSERT_FALSE(model.empty()) << "missing " << kStoriesBin;
  ASSERT_FALSE(tok.empty()) << "missing " << kStoriesTok;

  Result<ConvertedModel> conv = convert_llama2c(model, tok);
  ASSERT_TRUE(conv.ok()) << conv.message();
  const ConvertedModel& m = *conv;
  EXPECT_EQ(m.config.dim, 64);
  EXPECT_EQ(m.config.hidden_dim, 172);
  EXPECT_EQ(m.config.n_layers, 5);
  EXPECT_EQ(m.config.n_heads, 8);
  EXPECT_EQ(m.config.n_kv_heads, 4);
  EXPECT_EQ(m.config.vocab_size, 512);
  EXPECT_EQ(m.config.seq_len, 512);
  EXPECT_TRUE(m.config.shared_classifier);
  EXPECT_EQ(m.tensors.size(), 3u + 9u * 5u);

  Result<std::vector<uint8_t>> bytes = m.make_writer().serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  Result<GgufFile> parsed = parse_gguf(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  const GgufFile& g = *parsed;

  EXPECT_EQ(g.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(g.get_u32("llama.context_length").value(), 512u);
  EXPECT_EQ(g.get_u32("llama.embedding_length").value(), 64u);
  EXPECT_EQ(g.get_u32("llama.block_count").value(), 5u);
  EXPECT_EQ(g.get_u32("llama.feed_forward_length").value(), 172u);
  EXPECT_EQ(g.get_u32("llama.attention.head_count").value(), 8u);
  EXPECT_EQ(g.get_u32("llama.attention.head_count_kv").value(), 4u);
  EXPECT_EQ(g.get_u32("llama.rope.dimension_count").value(), 8u);
  EXPECT_FLOAT_EQ(g.get_f32("llama.attention.layer_norm_rms_epsilon").value(), 1e-5f);
  EXPECT_EQ(g.get_string("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(g.get_u32("tokenizer.ggml.unknown_token_id").value(), 0u);
  EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(g.get_u32("tokenizer.ggml.eos_token_id").value(), 2u);

  const std::vector<std::string> tokens = g.get_str_array("tokenizer.ggml.tokens").value();
  const std::vector<float> scores = g.get_f32_array("tokenizer.ggml.scores").value();
  const std::vector<int32_t> types = g.get_i32_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(scores.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(types[2], 3);
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(types[3], 6);
  EXPECT_EQ(tokens[258], "<0xFF>");
  EXPECT_EQ(types[258], 6);
  EXPECT_EQ(tokens[259], "\xe2\x96\x81t");  // " t" with the SentencePiece space
  EXPECT_EQ(types[259], 1);
  EXPECT_FLOAT_EQ(scores[260], -1.0f);

  struct Expect {
    const char* name;
    std::vector<int64_t> ne;
  };
  const Expect expects[] = {
      {"token_embd.weight", {64, 512}},      {"output_norm.weight", {64}},
      {"output.weight", {64, 512}},          {"blk.0.attn_q.weight", {64, 64}},
      {"blk.0.attn_k.weight", {64, 32}},     {"blk.0.attn_v.weight", {64, 32}},
      {"blk.4.attn_output.weight", {64, 64}}, {"blk.4.attn_norm.weight", {64}},
      {"blk.2.ffn_gate.weight", {64, 172}},  {"blk.2.ffn_down.weight", {172, 64}},
      {"blk.2.ffn_up.weight", {64, 172}},    {"blk.3.ffn_norm.weight", {64}},
  };
  for (const Expect& e : expects) {
    const GgufTensorInfo* t = g.find_tensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->ne, e.ne) << e.name;
    EXPECT_EQ(t->type, GgmlType::F32) << e.name;
  }
  EXPECT_EQ(g.tensors.size(), 48u);

  // Shared classifier: output.weight is a byte copy of the embedding, as in llama.cpp.
  const GgufTensorInfo* emb = g.find_tensor("token_embd.weight");
  const GgufTensorInfo* out = g.find_tensor("output.weight");
  ASSERT_EQ(emb->nbytes, out->nbytes);
  EXPECT_EQ(std::memcmp(emb->data, out->data, emb->nbytes), 0);

  // Weights are copied verbatim: blk.1.attn_q starts after emb, rms_att and layer 0's wq.
  const size_t q1 = 28 + (512 * 64 + 5 * 64 + 1 * 64 * 64) * 4;
  const GgufTensorInfo* wq1 = g.find_tensor("blk.1.attn_q.weight");
  EXPECT_EQ(std::memcmp(wq1->data, model.data() + q1, wq1->nbytes), 0);
  // ...and rms_final sits right before the RoPE tables at the end of the file.
  const size_t rms_final = model.size() - 512 * 8 * 4 - 64 * 4;
  const GgufTensorInfo* norm = g.find_tensor("output_norm.weight");
  EXPECT_EQ(std::memcmp(norm->data, model.data() + rms_final, 64 * 4), 0);
}

TEST(Llama2c, WriteGgufFileRoundTrips) {
  const Tiny tiny;
  Result<ConvertedModel> m = convert_llama2c(tiny.model(), tiny.tokenizer());
  ASSERT_TRUE(m.ok()) << m.message();
  const std::string path = testing::TempDir() + "/hc_llama2c_tiny.gguf";
  ASSERT_TRUE(m->write_gguf(path).ok());
  Result<MappedFile> f = MappedFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  Result<GgufFile> g = parse_gguf(f->bytes());
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->tensors.size(), 3u + 9u * 2u);
  EXPECT_EQ(g->get_u32("llama.rope.dimension_count").value(), 2u);
  std::remove(path.c_str());
}

TEST(Llama2c, TinyLayoutOffsetsAndVocab) {
  const Tiny tiny;
  Result<ConvertedModel> conv = convert_llama2c(tiny.model(), tiny.tokenizer());
  ASSERT_TRUE(conv.ok()) << conv.message();
  const ConvertedModel& m = *conv;
  // Payload offsets (floats): emb 0 (40), rms_att 40 (16), wq 56 (128), wk 184 (2*32),
  // wv 248 (64), wo 312 (128), rms_ffn 440 (16), w1 456 (192), w2 648 (192), w3 840 (192),
  // rms_final 1032 (8), freq_cis 1040 (8).
  EXPECT_EQ(first_value(m, "token_embd.weight"), 0.0f);
  EXPECT_EQ(first_value(m, "output.weight"), 0.0f);
  EXPECT_EQ(first_value(m, "blk.0.attn_norm.weight"), 40.0f);
  EXPECT_EQ(first_value(m, "blk.1.attn_norm.weight"), 48.0f);
  EXPECT_EQ(first_value(m, "blk.1.attn_q.weight"), 56.0f + 64);
  EXPECT_EQ(first_value(m, "blk.1.attn_k.weight"), 184.0f + 32);
  EXPECT_EQ(first_value(m, "blk.0.attn_v.weight"), 248.0f);
  EXPECT_EQ(first_value(m, "blk.1.attn_output.weight"), 312.0f + 64);
  EXPECT_EQ(first_value(m, "blk.1.ffn_norm.weight"), 448.0f);
  EXPECT_EQ(first_value(m, "blk.1.ffn_gate.weight"), 456.0f + 96);
  EXPECT_EQ(first_value(m, "blk.1.ffn_down.weight"), 648.0f + 96);
  EXPECT_EQ(first_value(m, "blk.0.ffn_up.weight"), 840.0f);
  EXPECT_EQ(first_value(m, "output_norm.weight"), 1032.0f);
  EXPECT_EQ(m.find_tensor("blk.0.attn_k.weight")->ne, (std::vector<int64_t>{8, 4}));

  ASSERT_EQ(m.vocab.tokens.size(), 5u);
  EXPECT_EQ(m.vocab.tokens[3], "<0x41>");
  EXPECT_EQ(m.vocab.token_types[3], kTokenByte);
  EXPECT_EQ(m.vocab.tokens[4], "\xe2\x96\x81hi\xe2\x96\x81there");
  EXPECT_EQ(m.vocab.token_types[4], kTokenNormal);
  EXPECT_FLOAT_EQ(m.vocab.scores[4], -4.0f);
}

TEST(Llama2c, UnsharedClassifierUsesWcls) {
  Tiny tiny;
  tiny.shared = false;
  Result<ConvertedModel> conv = convert_llama2c(tiny.model(), tiny.tokenizer());
  ASSERT_TRUE(conv.ok()) << conv.message();
  EXPECT_FALSE(conv->config.shared_classifier);
  EXPECT_EQ(conv->config.vocab_size, 5);
  EXPECT_EQ(first_value(*conv, "token_embd.weight"), 0.0f);
  EXPECT_EQ(first_value(*conv, "output.weight"), 1048.0f);  // after the 8 RoPE floats
}

TEST(Llama2c, TruncatedOrOversizedModelIsAnError) {
  const Tiny tiny;
  const std::vector<uint8_t> model = tiny.model();
  const std::vector<uint8_t> tok = tiny.tokenizer();
  for (size_t len : {size_t{0}, size_t{4}, size_t{27}, size_t{28}, size_t{200},
                     model.size() / 2, model.size() - 4, model.size() - 1}) {
    std::span<const uint8_t> cut(model.data(), len);
    Result<ConvertedModel> r = convert_llama2c(cut, tok);
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_TRUE(r.message().find("truncated") != std::string::npos ||
                r.message().find("too short") != std::string::npos)
        << r.message();
  }
  std::vector<uint8_t> longer = model;
  longer.resize(model.size() + 4);
  Result<ConvertedModel> r = convert_llama2c(longer, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unexpected bytes"), std::string::npos) << r.message();
}

TEST(Llama2c, TruncatedTokenizerIsAnError) {
  const Tiny tiny;
  const std::vector<uint8_t> model = tiny.model();
  const std::vector<uint8_t> tok = tiny.tokenizer();
  for (size_t len : {size_t{0}, size_t{3}, size_t{4}, size_t{10}, tok.size() - 1}) {
    Result<ConvertedModel> r = convert_llama2c(model, std::span<const uint8_t>(tok.data(), len));
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_TRUE(r.message().find("truncated") != std::string::npos ||
                r.message().find("too short") != std::string::npos)
        << r.message();
  }
  std::vector<uint8_t> longer = tok;
  put_f32(&longer, 0.0f);
  Result<ConvertedModel> r = convert_llama2c(model, longer);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("do not match"), std::string::npos) << r.message();

  std::vector<uint8_t> bad_len = tok;
  const int32_t neg = -5;
  std::memcpy(bad_len.data() + 8, &neg, 4);  // length of token 0
  r = convert_llama2c(model, bad_len);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("token 0 has length -5"), std::string::npos) << r.message();
}

TEST(Llama2c, AbsurdHeadersAreErrors) {
  const Tiny good;
  const std::vector<uint8_t> tok = good.tokenizer();
  auto expect_error = [&](Tiny t, const char* needle) {
    Result<ConvertedModel> r = convert_llama2c(t.model(), tok);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  Tiny t = good;
  t.dim = -8;
  expect_error(t, "dim = -8");
  t = good;
  t.heads = 3;
  expect_error(t, "not a multiple of n_heads");
  t = good;
  t.kv_heads = 3;
  expect_error(t, "not a multiple of n_kv_heads");
  t = good;
  t.kv_heads = 8;
  expect_error(t, "n_kv_heads = 8");
  t = good;
  t.heads = 8;  // head_dim 1
  t.kv_heads = 8;
  expect_error(t, "odd");
  t = good;
  t.layers = 0;
  expect_error(t, "n_layers = 0");

  // A huge header must be rejected by the size check, not by allocating.
  std::vector<uint8_t> huge;
  for (int32_t v : {4096, 11008, 32, 32, 32, 32000, 2048}) put_i32(&huge, v);
  Result<ConvertedModel> r = convert_llama2c(huge, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("truncated: token_embedding_table"), std::string::npos)
      << r.message();

  std::vector<uint8_t> v1;
  put_i32(&v1, 0x616b3432);
  for (int i = 0; i < 6; ++i) put_i32(&v1, 1);
  r = convert_llama2c(v1, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("ak42"), std::string::npos) << r.message();

  std::vector<uint8_t> min_vocab;
  for (int32_t v : {8, 12, 2, 4, 2, INT32_MIN, 4}) put_i32(&min_vocab, v);
  r = convert_llama2c(min_vocab, tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("vocab_size"), std::string::npos) << r.message();
}

TEST(Llama2c, VocabMismatchIsAnError) {
  Tiny tiny;
  const std::vector<uint8_t> tok = tiny.tokenizer();  // 5 tokens
  tiny.vocab = 6;
  Result<ConvertedModel> r = convert_llama2c(tiny.model(), tok);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("token 5 of 6"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hc
