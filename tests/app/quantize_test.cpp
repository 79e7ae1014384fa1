// hotcold quantize: llama.cpp's per-tensor type rules (model/quantize_plan.h) and an
// end-to-end round trip through the binary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "cli_util.h"
#include "core/mmap.h"
#include "format/gguf.h"
#include "model/quantize_plan.h"
#include "quant/quant.h"

namespace hc {
namespace {

using test::CliResult;
using test::run_hotcold;
using test::ScratchDir;

// Tensor infos only (no data): enough for planning.
GgufFile fake_llama(int n_layer, int64_t n_embd, int64_t n_ff, bool tied = false) {
  GgufFile f;
  f.kv.emplace_back("general.architecture", GgufValue::str("llama"));
  f.kv.emplace_back("llama.block_count", GgufValue::u32(static_cast<uint32_t>(n_layer)));
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    GgufTensorInfo t;
    t.name = name;
    t.ne = std::move(ne);
    t.type = GgmlType::F32;
    f.tensors.push_back(t);
  };
  add("token_embd.weight", {n_embd, 512});
  add("output_norm.weight", {n_embd});
  if (!tied) add("output.weight", {n_embd, 512});
  for (int il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add(b + "attn_norm.weight", {n_embd});
    add(b + "attn_q.weight", {n_embd, n_embd});
    add(b + "attn_k.weight", {n_embd, n_embd});
    add(b + "attn_v.weight", {n_embd, n_embd});
    add(b + "attn_output.weight", {n_embd, n_embd});
    add(b + "ffn_norm.weight", {n_embd});
    add(b + "ffn_gate.weight", {n_embd, n_ff});
    add(b + "ffn_up.weight", {n_embd, n_ff});
    add(b + "ffn_down.weight", {n_ff, n_embd});
  }
  return f;
}

std::map<std::string, GgmlType> plan_types(const GgufFile& f, const std::string& type,
                                           bool pure = false) {
  auto target = parse_quantize_target(type);
  EXPECT_TRUE(target.ok()) << target.message();
  target->pure = target->pure || pure;
  auto plan = plan_quantization(f, *target);
  EXPECT_TRUE(plan.ok()) << plan.message();
  std::map<std::string, GgmlType> out;
  for (const auto& p : *plan) out[p.name] = p.to;
  return out;
}

TEST(QuantizePlan, TargetNamesAreCaseInsensitive) {
  auto t = parse_quantize_target("q4_k_m");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "Q4_K_M");
  EXPECT_EQ(t->ftype, LlamaFtype::MOSTLY_Q4_K_M);
  EXPECT_EQ(static_cast<uint32_t>(t->ftype), 15u);
  EXPECT_EQ(static_cast<uint32_t>(parse_quantize_target("Bf16")->ftype), 32u);
  EXPECT_EQ(static_cast<uint32_t>(parse_quantize_target("q8_0")->ftype), 7u);
  EXPECT_EQ(static_cast<uint32_t>(parse_quantize_target("Q5_K_M")->ftype), 17u);
  EXPECT_EQ(static_cast<uint32_t>(parse_quantize_target("q6_k")->ftype), 18u);
  auto bad = parse_quantize_target("Q3_K");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("unknown quantization type 'Q3_K'"), std::string::npos);
  EXPECT_NE(bad.message().find("Q4_K_M"), std::string::npos) << bad.message();
}

// llama.cpp's use_more_bits for 8 layers selects layers 0, 3, 6 and 7.
TEST(QuantizePlan, Q4KMGivesMoreBitsToAttnVAndFfnDownLayers) {
  auto t = plan_types(fake_llama(8, 256, 512), "Q4_K_M");
  for (int il = 0; il < 8; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const bool more = il == 0 || il == 3 || il == 6 || il == 7;
    EXPECT_EQ(t[b + "attn_v.weight"], more ? GgmlType::Q6_K : GgmlType::Q4_K) << il;
    EXPECT_EQ(t[b + "ffn_down.weight"], more ? GgmlType::Q6_K : GgmlType::Q4_K) << il;
    EXPECT_EQ(t[b + "attn_q.weight"], GgmlType::Q4_K);
    EXPECT_EQ(t[b + "ffn_up.weight"], GgmlType::Q4_K);
    EXPECT_EQ(t[b + "attn_norm.weight"], GgmlType::F32);
  }
  EXPECT_EQ(t["output.weight"], GgmlType::Q6_K);
  EXPECT_EQ(t["token_embd.weight"], GgmlType::Q4_K);
  EXPECT_EQ(t["output_norm.weight"], GgmlType::F32);

  auto t5 = plan_types(fake_llama(8, 256, 512), "Q5_K_M");
  EXPECT_EQ(t5["blk.3.attn_v.weight"], GgmlType::Q6_K);
  EXPECT_EQ(t5["blk.4.ffn_down.weight"], GgmlType::Q5_K);
  EXPECT_EQ(t5["output.weight"], GgmlType::Q6_K);
}

TEST(QuantizePlan, Q4KSAndUniformTypes) {
  auto s = plan_types(fake_llama(8, 256, 512), "Q4_K_S");
  EXPECT_EQ(s["blk.3.attn_v.weight"], GgmlType::Q5_K);  // first 4 attn_v
  EXPECT_EQ(s["blk.4.attn_v.weight"], GgmlType::Q4_K);
  EXPECT_EQ(s["blk.0.ffn_down.weight"], GgmlType::Q5_K);  // first n_layer/8 ffn_down
  EXPECT_EQ(s["blk.1.ffn_down.weight"], GgmlType::Q4_K);
  auto u = plan_types(fake_llama(8, 256, 512), "Q4_K");
  for (const auto& [name, type] : u)
    EXPECT_EQ(type, name.find("norm") != std::string::npos ? GgmlType::F32 : GgmlType::Q4_K)
        << name;
  auto pure = plan_types(fake_llama(8, 256, 512), "Q4_0", /*pure=*/true);
  EXPECT_EQ(pure["output.weight"], GgmlType::Q4_0);
}

TEST(QuantizePlan, LegacyAndFloatTargets) {
  auto q40 = plan_types(fake_llama(2, 256, 512), "Q4_0");
  EXPECT_EQ(q40["output.weight"], GgmlType::Q6_K);  // as llama.cpp
  EXPECT_EQ(q40["blk.0.attn_v.weight"], GgmlType::Q4_0);
  auto q80 = plan_types(fake_llama(2, 256, 512), "Q8_0");
  EXPECT_EQ(q80["output.weight"], GgmlType::Q8_0);
  auto f16 = plan_types(fake_llama(2, 256, 512), "F16");
  EXPECT_EQ(f16["output.weight"], GgmlType::F16);
  EXPECT_EQ(f16["token_embd.weight"], GgmlType::F16);
  EXPECT_EQ(f16["blk.1.ffn_norm.weight"], GgmlType::F32);
  // Tied embeddings: token_embd takes the output tensor's rule.
  auto tied = plan_types(fake_llama(2, 256, 512, /*tied=*/true), "Q4_K_M");
  EXPECT_EQ(tied["token_embd.weight"], GgmlType::Q6_K);
}

TEST(QuantizePlan, IncompatibleRowLengthsFallBack) {
  // n_embd 64: not a multiple of 256 -> Q4_K falls back to Q5_0, Q6_K to Q8_0 (llama.cpp's);
  // n_ff 172: not a multiple of 32 either -> F16.
  auto target = parse_quantize_target("Q4_K_M");
  auto plan = plan_quantization(fake_llama(5, 64, 172), *target);
  ASSERT_TRUE(plan.ok()) << plan.message();
  std::map<std::string, TensorQuantPlan> by;
  for (const auto& p : *plan) by[p.name] = p;
  EXPECT_EQ(by["blk.1.attn_q.weight"].to, GgmlType::Q5_0);
  EXPECT_NE(by["blk.1.attn_q.weight"].note.find("fallback to Q5_0"), std::string::npos);
  // use_more_bits for 5 layers picks layers 2 and 4: Q6_K, which falls back to Q8_0.
  EXPECT_EQ(by["blk.4.attn_v.weight"].to, GgmlType::Q8_0);
  EXPECT_EQ(by["blk.2.attn_v.weight"].to, GgmlType::Q8_0);
  EXPECT_EQ(by["blk.1.attn_v.weight"].to, GgmlType::Q5_0);
  EXPECT_EQ(by["output.weight"].to, GgmlType::Q8_0);
  EXPECT_EQ(by["blk.2.ffn_down.weight"].to, GgmlType::F16);
  EXPECT_NE(by["blk.2.ffn_down.weight"].note.find("row length 172"), std::string::npos);
}

TEST(QuantizePlan, UnsupportedInputTypeNamesTensor) {
  GgufFile f = fake_llama(1, 256, 512);
  for (auto& t : f.tensors)
    if (t.name == "blk.0.attn_k.weight") t.type = GgmlType::Q2_K;
  auto target = parse_quantize_target("Q8_0");
  auto plan = plan_quantization(f, *target);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("tensor 'blk.0.attn_k.weight': cannot convert from type Q2_K"),
            std::string::npos)
      << plan.message();
}

// --- end to end through the binary ---

struct SmallModel {
  std::vector<float> w;     // [4 rows, 256] row-major: ggml ne = {256, 4}
  std::vector<float> norm;  // [256]
};

void write_small_model(const std::string& path, SmallModel* m) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  m->w.resize(256 * 4);
  for (float& x : m->w) x = dist(rng);
  m->w[17] = 3.0f;  // an outlier, so blocks differ in scale
  m->norm.assign(256, 1.0f);
  for (size_t i = 0; i < m->norm.size(); ++i) m->norm[i] += 0.001f * static_cast<float>(i);
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("general.name", GgufValue::str("tiny test model"));
  w.set("llama.block_count", GgufValue::u32(1));
  w.set("general.file_type", GgufValue::u32(0));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array({"a", "b", "c"}));
  w.add_tensor({"blk.0.ffn_up.weight", {256, 4}, GgmlType::F32,
                {reinterpret_cast<const uint8_t*>(m->w.data()), m->w.size() * 4}});
  w.add_tensor({"blk.0.ffn_norm.weight", {256}, GgmlType::F32,
                {reinterpret_cast<const uint8_t*>(m->norm.data()), m->norm.size() * 4}});
  ASSERT_TRUE(w.write_file(path).ok());
}

// Per-element error bound of one quantised block of values x, derived from the format:
// Q8_0: d = amax/127, rounding to the nearest step gives |e| <= d/2, plus d's fp16 rounding
//       (relative 2^-11) times |q| <= 127.
// Q4_K: 4-bit codes over the sub-block's [min, max]: one rounding step is R/15 at best; the
//       6-bit scale and min codes may stretch that step, so allow one full step at the
//       super-block's range R = max - min(0, min) plus the fp16 rounding.
double error_bound(GgmlType t, const float* x, int n) {
  double amax = 0, mx = 0, mn = 0;
  for (int i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(double(x[i])));
    mx = std::max(mx, double(x[i]));
    mn = std::min(mn, double(x[i]));
  }
  if (t == GgmlType::Q8_0) return amax / 127 * (0.5 + 127.0 / 2048) + 1e-7;
  HC_CHECK(t == GgmlType::Q4_K);
  return (mx - mn) / 15 * (1.0 + 16.0 / 2048) + 1e-6;
}

TEST(QuantizeCli, RoundTripQ8_0AndQ4_K) {
  ScratchDir dir;
  SmallModel m;
  const std::string in = dir.file("in.gguf");
  write_small_model(in, &m);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K}) {
    const std::string name = dtype_name(type);
    const std::string out = dir.file("out_" + name + ".gguf");
    CliResult r = run_hotcold({"quantize", "-m", in, "-o", out, "--type", name, "-t", "3"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("[   1/   2] blk.0.ffn_up.weight"), std::string::npos) << r.err;

    auto mf = MappedFile::open(out);
    ASSERT_TRUE(mf.ok()) << mf.message();
    auto f = parse_gguf(mf->bytes());
    ASSERT_TRUE(f.ok()) << f.message();
    // Metadata copied, file type updated.
    EXPECT_EQ(*f->get_string("general.name"), "tiny test model");
    EXPECT_EQ(*f->get_u32("llama.block_count"), 1u);
    EXPECT_EQ(f->get_str_array("tokenizer.ggml.tokens")->size(), 3u);
    EXPECT_EQ(*f->get_u32("general.file_type"), type == GgmlType::Q8_0 ? 7u : 14u);
    EXPECT_EQ(*f->get_u32("general.quantization_version"), 2u);
    // The norm is copied verbatim.
    const GgufTensorInfo* norm = f->find_tensor("blk.0.ffn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, GgmlType::F32);
    EXPECT_EQ(std::memcmp(norm->data, m.norm.data(), norm->nbytes), 0);
    // The matrix: exactly what quantize_row makes of the input, and close to the input.
    const GgufTensorInfo* w = f->find_tensor("blk.0.ffn_up.weight");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->type, type);
    ASSERT_EQ(w->ne, (std::vector<int64_t>{256, 4}));
    const int64_t rb = row_bytes(type, 256);
    ASSERT_EQ(w->nbytes, static_cast<uint64_t>(rb * 4));
    std::vector<uint8_t> expect(rb);
    std::vector<float> deq(256);
    const int block = type == GgmlType::Q8_0 ? 32 : 256;
    for (int r = 0; r < 4; ++r) {
      const float* src = m.w.data() + r * 256;
      quant::quantize_row_ref(type, src, expect.data(), 256);
      EXPECT_EQ(std::memcmp(w->data + r * rb, expect.data(), rb), 0) << name << " row " << r;
      quant::dequantize_row_ref(type, w->data + r * rb, deq.data(), 256);
      for (int b = 0; b < 256; b += block) {
        const double bound = error_bound(type, src + b, block);
        for (int i = b; i < b + block; ++i)
          ASSERT_LE(std::fabs(deq[i] - src[i]), bound) << name << " row " << r << " col " << i;
      }
    }
  }
}

TEST(QuantizeCli, RequantizesQuantizedInputAndRejectsBadTypes) {
  ScratchDir dir;
  SmallModel m;
  const std::string in = dir.file("in.gguf");
  write_small_model(in, &m);
  const std::string q8 = dir.file("q8.gguf"), f32 = dir.file("f32.gguf");
  ASSERT_EQ(run_hotcold({"quantize", in, q8, "q8_0"}).exit_code, 0);  // positional form
  CliResult r = run_hotcold({"quantize", "-m", q8, "-o", f32, "--type", "F32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto mf = MappedFile::open(f32);
  ASSERT_TRUE(mf.ok());
  auto f = parse_gguf(mf->bytes());
  ASSERT_TRUE(f.ok()) << f.message();
  const GgufTensorInfo* w = f->find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, GgmlType::F32);
  EXPECT_EQ(*f->get_u32("general.file_type"), 0u);
  const float* deq = reinterpret_cast<const float*>(w->data);
  for (int b = 0; b < 1024; b += 32) {
    const double bound = error_bound(GgmlType::Q8_0, m.w.data() + b, 32);
    for (int i = b; i < b + 32; ++i) ASSERT_LE(std::fabs(deq[i] - m.w[i]), bound) << i;
  }

  r = run_hotcold({"quantize", "-m", in, "-o", dir.file("x.gguf"), "--type", "Q3_K"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown quantization type 'Q3_K'"), std::string::npos) << r.err;
  r = run_hotcold({"quantize", "-m", in, "-o", in, "--type", "Q8_0"});
  EXPECT_EQ(r.exit_code, 2) << "refuses to overwrite its input";
  EXPECT_EQ(run_hotcold({"quantize", "-m", in, "--type", "Q8_0"}).exit_code, 2);
  // A corrupt input is a runtime error, not a crash.
  test::write_all(dir.file("cut.gguf"), test::read_all(in).substr(0, 200));
  r = run_hotcold({"quantize", "-m", dir.file("cut.gguf"), "-o", dir.file("y.gguf"), "--type",
                   "Q8_0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("hotcold quantize: error: " + dir.file("cut.gguf") + ": "),
            std::string::npos)
      << r.err;
  // --dry-run prints the plan without writing.
  r = run_hotcold({"quantize", "-m", in, "--type", "Q4_K_M", "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("blk.0.ffn_up.weight"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace hc
