#include "format/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/mmap.h"

namespace hc {
namespace {

GgufWriter sample_writer(std::vector<float>* weights, std::vector<uint8_t>* q8) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("llama.block_count", GgufValue::u32(2));
  w.set("llama.rope.freq_base", GgufValue::f32(10000.0f));
  w.set("flag", GgufValue::boolean(true));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array({"<unk>", "a", "b\xE2\x96\x81"}));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array({0.f, -1.5f, -2.f}));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array({2, 1, 1}));
  weights->resize(64 * 3);
  for (size_t i = 0; i < weights->size(); ++i) (*weights)[i] = 0.25f * static_cast<float>(i);
  w.add_tensor({"blk.0.attn_q.weight", {64, 3}, GgmlType::F32,
                {reinterpret_cast<const uint8_t*>(weights->data()), weights->size() * 4}});
  q8->assign(34 * 2, 7);
  w.add_tensor({"q8", {64}, GgmlType::Q8_0, {q8->data(), q8->size()}});
  return w;
}

TEST(Gguf, WriterRoundTripsMetadataAndTensors) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  auto bytes = sample_writer(&wts, &q8).serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  auto f = parse_gguf(*bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_u32("llama.block_count"), 2u);
  EXPECT_FLOAT_EQ(*f->get_f32("llama.rope.freq_base"), 10000.0f);
  EXPECT_TRUE(*f->get_bool("flag"));
  auto toks = f->get_str_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.ok());
  EXPECT_EQ((*toks)[2], "b\xE2\x96\x81");
  EXPECT_EQ((*f->get_f32_array("tokenizer.ggml.scores"))[1], -1.5f);
  EXPECT_EQ((*f->get_i32_array("tokenizer.ggml.token_type"))[0], 2);
  const GgufTensorInfo* t = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(t->nbytes, 64u * 3 * 4);
  EXPECT_EQ((t->data - bytes->data()) % 32, 0);  // aligned relative to the file start
  EXPECT_EQ(std::memcmp(t->data, wts.data(), t->nbytes), 0);
  const GgufTensorInfo* q = f->find_tensor("q8");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q8_0);
  EXPECT_EQ(q->nbytes, 34u * 2);
}

// serialize_header() + each tensor's data + padding(nbytes) zeros is serialize(), byte for byte;
// the header needs no tensor data, only shapes and types.
TEST(Gguf, StreamedWriteEqualsSerialize) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  GgufWriter w = sample_writer(&wts, &q8);
  w.alignment = 64;  // also covers the written general.alignment key
  auto whole = w.serialize();
  ASSERT_TRUE(whole.ok()) << whole.message();

  GgufWriter shapes_only = w;
  for (auto& t : shapes_only.tensors) t.data = {};
  auto header = shapes_only.serialize_header();
  ASSERT_TRUE(header.ok()) << header.message();
  EXPECT_EQ(header->size() % 64, 0u);
  std::vector<uint8_t> streamed = *header;
  for (const auto& t : w.tensors) {
    streamed.insert(streamed.end(), t.data.begin(), t.data.end());
    streamed.resize(streamed.size() + w.padding(t.data.size()), 0);
  }
  EXPECT_EQ(streamed, *whole);
  EXPECT_EQ(w.padding(64), 0u);
  EXPECT_EQ(w.padding(68), 60u);

  auto missing = shapes_only.serialize();  // the whole file still needs the data
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("expected 768 bytes of F32 data, found 0"), std::string::npos)
      << missing.message();
  shapes_only.tensors[1].ne = {60};  // not a multiple of Q8_0's 32
  EXPECT_FALSE(shapes_only.serialize_header().ok());
}

TEST(Gguf, TypedGettersNameExpectedAndFound) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  auto bytes = sample_writer(&wts, &q8).serialize();
  auto f = parse_gguf(*bytes);
  ASSERT_TRUE(f.ok());
  auto r = f->get_u32("general.architecture");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("expected an unsigned integer, found string"), std::string::npos)
      << r.message();
  auto m = f->get_string("nope");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("missing metadata key 'nope'"), std::string::npos);
  EXPECT_EQ(*f->get_u32_or("nope", 7), 7u);
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  auto bytes = *sample_writer(&wts, &q8).serialize();
  auto full = parse_gguf(bytes);
  ASSERT_TRUE(full.ok());
  // Trailing alignment padding after the last tensor is optional; anything shorter is not.
  const auto& last = full->tensors.back();
  const size_t data_end = static_cast<size_t>(last.data + last.nbytes - bytes.data());
  ASSERT_LT(data_end, bytes.size());
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    auto f = parse_gguf(cut);
    EXPECT_FALSE(f.ok()) << "truncated at " << n << " parsed";
    if (!f.ok()) {
      EXPECT_FALSE(f.message().empty());
    }
  }
}

TEST(Gguf, RandomByteCorruptionNeverCrashes) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  const auto bytes = *sample_writer(&wts, &q8).serialize();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int it = 0; it < 5000; ++it) {
    auto b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % 400] = static_cast<uint8_t>(rng());
    auto f = parse_gguf(b);
    if (!f.ok()) {
      ++errors;
      continue;
    }
    for (const auto& t : f->tensors) {  // parsed tensors must lie within the buffer
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
    }
  }
  EXPECT_GT(errors, 100);
}

// Builds a header by hand to hit specific validation paths.
std::vector<uint8_t> header(uint32_t magic, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> b(24);
  std::memcpy(&b[0], &magic, 4);
  std::memcpy(&b[4], &version, 4);
  std::memcpy(&b[8], &n_tensors, 8);
  std::memcpy(&b[16], &n_kv, 8);
  return b;
}

TEST(Gguf, SpecificCorruptCasesGiveClearErrors) {
  auto bad_magic = parse_gguf(header(0x12345678, 3, 0, 0));
  ASSERT_FALSE(bad_magic.ok());
  EXPECT_NE(bad_magic.message().find("expected magic 'GGUF'"), std::string::npos);

  auto v1 = parse_gguf(header(0x46554747, 1, 0, 0));
  ASSERT_FALSE(v1.ok());
  EXPECT_NE(v1.message().find("unsupported GGUF version 1"), std::string::npos);

  auto absurd = parse_gguf(header(0x46554747, 3, 0, uint64_t{1} << 62));
  ASSERT_FALSE(absurd.ok());
  EXPECT_NE(absurd.message().find("metadata count"), std::string::npos);

  auto empty = parse_gguf(header(0x46554747, 3, 0, 0));
  ASSERT_TRUE(empty.ok()) << empty.message();

  auto pwri = parse_gguf(header(0x49525750, 3, 0, 0));
  ASSERT_TRUE(pwri.ok());
  EXPECT_TRUE(pwri->powerinfer_magic);
}

TEST(Gguf, UnknownTensorTypeAndBadOffsetsAreErrors) {
  std::vector<float> wts;
  std::vector<uint8_t> q8;
  auto w = sample_writer(&wts, &q8);
  auto bytes = *w.serialize();
  auto f = parse_gguf(bytes);
  ASSERT_TRUE(f.ok());
  // Locate the "q8" tensor info: name, n_dims=1, ne, type, offset.
  const std::string name = "q8";
  size_t pos = 0;
  for (size_t i = 0; i + 10 < bytes.size(); ++i) {
    uint64_t len;
    std::memcpy(&len, &bytes[i], 8);
    if (len == 2 && std::memcmp(&bytes[i + 8], "q8", 2) == 0) pos = i + 10;
  }
  ASSERT_GT(pos, 0u);
  const size_t type_pos = pos + 4 + 8;
  auto bad_type = bytes;
  uint32_t t = 77;
  std::memcpy(&bad_type[type_pos], &t, 4);
  auto r = parse_gguf(bad_type);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unknown ggml type id 77"), std::string::npos) << r.message();

  auto bad_off = bytes;
  uint64_t off = 1u << 30;
  std::memcpy(&bad_off[type_pos + 4], &off, 8);
  r = parse_gguf(bad_off);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("outside the data section"), std::string::npos) << r.message();

  auto misaligned = bytes;
  off = 3;
  std::memcpy(&misaligned[type_pos + 4], &off, 8);
  r = parse_gguf(misaligned);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("alignment"), std::string::npos) << r.message();
}

TEST(Gguf, ParsesConformanceVocabFiles) {
  for (const char* name : {"llama-spm", "gpt-2", "starcoder", "deepseek-coder", "phi-3", "falcon"}) {
    const std::string path = std::string("../shared/tokenizer-conformance/ggml-vocab-") + name + ".gguf";
    auto mf = MappedFile::open(path);
    ASSERT_TRUE(mf.ok()) << mf.message();
    auto f = parse_gguf(mf->bytes());
    ASSERT_TRUE(f.ok()) << path << ": " << f.message();
    auto toks = f->get_str_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(toks.ok()) << toks.message();
    EXPECT_GT(toks->size(), 1000u);
  }
}

}  // namespace
}  // namespace hc
