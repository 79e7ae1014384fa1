// Plan files: round trip of our format, PowerInfer's .gpuidx files (PWRI magic, no attention
// tensors, gpu_bucket optional), tensors found by name whatever their order (13 layers, stored
// in name order blk.0, blk.1, blk.10, ...), errors naming the file and what was expected and
// found, and the plan cache's file names and identity checks.
#include "sparse/placement_plan.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "format/gguf.h"

namespace hc::sparse {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hotcold_plan_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

PlacementPlan sample_plan() {
  PlacementPlan p = empty_plan(3, 10);
  p.layers[0].hot = {0, 3, 9};
  p.layers[0].attn_on_device = true;
  p.layers[1].hot = {};  // an empty bucket: a [0] tensor
  p.layers[2].hot = {1, 2, 3, 4, 5, 6, 7, 8};
  p.model_id = "m.gguf:123:456";
  p.stats_id = "s.gguf:7:8";
  p.solver = "ilp";
  p.budget_bytes = uint64_t{6} << 30;
  p.predicted_tok_s = 12.5f;
  return p;
}

void expect_same_placement(const PlacementPlan& a, const PlacementPlan& b) {
  ASSERT_EQ(a.n_layer(), b.n_layer());
  EXPECT_EQ(a.n_ff, b.n_ff);
  for (int il = 0; il < a.n_layer(); ++il) {
    SCOPED_TRACE(il);
    EXPECT_EQ(a.layers[static_cast<size_t>(il)].hot, b.layers[static_cast<size_t>(il)].hot);
    EXPECT_EQ(a.layers[static_cast<size_t>(il)].attn_on_device,
              b.layers[static_cast<size_t>(il)].attn_on_device);
  }
}

std::span<const uint8_t> bytes_of(const std::vector<int32_t>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(int32_t)};
}

// A GGUF file as PowerInfer's export_split writes it: general.architecture generic.gpu_index,
// block_count, split.vram_capacity, per layer I32 gpu_idx [n_ff] (and gpu_bucket [n_hot]), the
// magic patched to "PWRI".
struct GpuIdxFile {
  std::vector<std::vector<int32_t>> idx, bucket;
  bool with_bucket = true;
  bool pwri = true;
  std::vector<uint8_t> bytes() const {
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("generic.gpu_index"));
    w.set("generic.gpu_index.block_count", GgufValue::u32(static_cast<uint32_t>(idx.size())));
    w.set("split.vram_capacity", GgufValue::u64(123456789));
    for (size_t il = 0; il < idx.size(); ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      w.add_tensor({b + "gpu_idx", {static_cast<int64_t>(idx[il].size())}, GgmlType::I32,
                    bytes_of(idx[il])});
      if (with_bucket)
        w.add_tensor({b + "gpu_bucket", {static_cast<int64_t>(bucket[il].size())}, GgmlType::I32,
                      bytes_of(bucket[il])});
    }
    auto out = w.serialize();
    EXPECT_TRUE(out.ok()) << out.message();
    std::vector<uint8_t> v = std::move(out).value();
    if (pwri) std::memcpy(v.data(), "PWRI", 4);
    return v;
  }
};

GpuIdxFile gpuidx_from(const PlacementPlan& p) {
  GpuIdxFile f;
  for (int il = 0; il < p.n_layer(); ++il) {
    f.idx.push_back(p.gpu_idx(il));
    f.bucket.push_back(p.layers[static_cast<size_t>(il)].hot);
  }
  return f;
}

Result<PlacementPlan> parse(const std::vector<uint8_t>& bytes) {
  return parse_plan(bytes, "plan.gguf");
}

void expect_error(const Result<PlacementPlan>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok());
  for (const std::string& part : parts)
    EXPECT_NE(r.message().find(part), std::string::npos) << "'" << part << "' in: " << r.message();
}

TEST(PlacementPlan, GpuIdxAndValidate) {
  const PlacementPlan p = sample_plan();
  EXPECT_EQ(p.gpu_idx(0), (std::vector<int32_t>{1, 0, 0, 1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(p.n_hot_total(), 11);
  EXPECT_TRUE(p.validate().ok());
  EXPECT_TRUE(p.check_matches(3, 10).ok());
  EXPECT_FALSE(p.check_matches(3, 11).ok());
  PlacementPlan bad = p;
  bad.layers[2].hot = {3, 3};
  EXPECT_FALSE(bad.validate().ok());
  bad.layers[2].hot = {10};
  EXPECT_FALSE(bad.validate().ok());
  EXPECT_FALSE(serialize_plan(bad).ok());
}

TEST(PlacementPlan, RoundTrip) {
  TempDir dir;
  const PlacementPlan p = sample_plan();
  ASSERT_TRUE(write_plan(dir.file("p.gguf"), p).ok());
  auto r = read_plan(dir.file("p.gguf"));
  ASSERT_TRUE(r.ok()) << r.message();
  expect_same_placement(p, *r);
  EXPECT_EQ(r->model_id, p.model_id);
  EXPECT_EQ(r->stats_id, p.stats_id);
  EXPECT_EQ(r->solver, "ilp");
  EXPECT_EQ(r->budget_bytes, p.budget_bytes);
  EXPECT_FLOAT_EQ(r->predicted_tok_s, 12.5f);
  // The file holds exactly the documented keys and tensors.
  auto bytes = serialize_plan(p);
  ASSERT_TRUE(bytes.ok());
  auto g = parse_gguf(*bytes);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->get_string("general.architecture"), "hotcold-plan");
  EXPECT_EQ(*g->get_u32("hotcold.plan.version"), 1u);
  EXPECT_EQ(*g->get_u32("hotcold.plan.n_layer"), 3u);
  EXPECT_EQ(*g->get_u32("hotcold.plan.n_ff"), 10u);
  ASSERT_EQ(g->tensors.size(), 9u);
  const GgufTensorInfo* b0 = g->find_tensor("blk.0.gpu_bucket");
  ASSERT_NE(b0, nullptr);
  EXPECT_EQ(b0->type, GgmlType::I32);
  EXPECT_EQ(b0->ne, (std::vector<int64_t>{3}));
  EXPECT_EQ(g->find_tensor("blk.1.gpu_bucket")->ne, (std::vector<int64_t>{0}));
  EXPECT_EQ(g->find_tensor("blk.2.gpu_idx")->ne, (std::vector<int64_t>{10}));
  EXPECT_EQ(g->find_tensor("blk.2.attn_gpu")->ne, (std::vector<int64_t>{1}));
}

TEST(PlacementPlan, ReadsPowerInferGpuIdx) {
  PlacementPlan p = sample_plan();
  p.layers[0].attn_on_device = false;  // PowerInfer files have no attention placement
  for (bool pwri : {true, false}) {
    for (bool with_bucket : {true, false}) {
      GpuIdxFile f = gpuidx_from(p);
      f.pwri = pwri;
      f.with_bucket = with_bucket;
      auto r = parse(f.bytes());
      ASSERT_TRUE(r.ok()) << r.message();
      expect_same_placement(p, *r);
      EXPECT_EQ(r->solver, "powerinfer");
      EXPECT_EQ(r->budget_bytes, 123456789u);
    }
  }
}

// 13 layers, each with its own hot set, stored in name order (blk.0, blk.1, blk.10, blk.11,
// blk.12, blk.2, ...) as a sorted-by-name writer would: every layer must get its own.
TEST(PlacementPlan, LayersAreReadByNameNotPosition) {
  PlacementPlan p = empty_plan(13, 64);
  for (int il = 0; il < 13; ++il) p.layers[static_cast<size_t>(il)].hot = {il, 20 + il, 50 + il};
  auto bytes = serialize_plan(p);
  ASSERT_TRUE(bytes.ok());
  auto g = parse_gguf(*bytes);
  ASSERT_TRUE(g.ok());
  // Rewrite with the tensors sorted by name (the file's order is not layer order).
  GgufWriter w;
  for (const auto& [k, v] : g->kv) w.set(k, v);
  std::vector<GgufTensorInfo> ts = g->tensors;
  std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  ASSERT_EQ(ts[3].name, "blk.1.attn_gpu");
  ASSERT_EQ(ts[6].name, "blk.10.attn_gpu");
  for (const GgufTensorInfo& t : ts)
    w.add_tensor({t.name, t.ne, t.type, {t.data, static_cast<size_t>(t.nbytes)}});
  auto shuffled = w.serialize();
  ASSERT_TRUE(shuffled.ok());
  auto r = parse(*shuffled);
  ASSERT_TRUE(r.ok()) << r.message();
  expect_same_placement(p, *r);

  // The same for a PowerInfer file.
  GpuIdxFile f = gpuidx_from(p);
  auto r2 = parse(f.bytes());
  ASSERT_TRUE(r2.ok()) << r2.message();
  expect_same_placement(p, *r2);
}

// Rebuilds a plan file with one tensor replaced (or removed when data is empty and ne is empty).
std::vector<uint8_t> with_tensor(const PlacementPlan& p, const std::string& name, GgmlType type,
                                 std::vector<int64_t> ne, const std::vector<int32_t>& data) {
  auto bytes = serialize_plan(p);
  EXPECT_TRUE(bytes.ok());
  auto g = parse_gguf(*bytes);
  EXPECT_TRUE(g.ok());
  GgufWriter w;
  for (const auto& [k, v] : g->kv) w.set(k, v);
  for (const GgufTensorInfo& t : g->tensors) {
    if (t.name != name) {
      w.add_tensor({t.name, t.ne, t.type, {t.data, static_cast<size_t>(t.nbytes)}});
    } else if (!ne.empty()) {
      w.add_tensor({name, ne, type, bytes_of(data)});
    }
  }
  auto out = w.serialize();
  EXPECT_TRUE(out.ok()) << out.message();
  return std::move(out).value();
}

TEST(PlacementPlan, ErrorsNameWhatWasExpectedAndFound) {
  const PlacementPlan p = sample_plan();
  expect_error(parse(with_tensor(p, "blk.1.attn_gpu", GgmlType::I32, {}, {})),
               {"plan.gguf", "missing tensor 'blk.1.attn_gpu'"});
  expect_error(parse(with_tensor(p, "blk.2.gpu_idx", GgmlType::I32, {11},
                                 std::vector<int32_t>(11, 0))),
               {"plan.gguf", "blk.2.gpu_idx", "expected I32 [10]", "found I32 [11]"});
  std::vector<int32_t> f32_bits(10, 0);
  expect_error(parse(with_tensor(p, "blk.0.gpu_idx", GgmlType::F32, {10}, f32_bits)),
               {"blk.0.gpu_idx", "expected I32 [10]", "found F32 [10]"});
  expect_error(parse(with_tensor(p, "blk.0.gpu_bucket", GgmlType::I32, {3}, {0, 3, 10})),
               {"blk.0.gpu_bucket", "neuron 10", "out of range [0, 10)"});
  expect_error(parse(with_tensor(p, "blk.0.gpu_bucket", GgmlType::I32, {3}, {0, 4, 9})),
               {"blk.0.gpu_bucket", "inconsistent with gpu_idx", "neuron 4 at position 1",
                "neuron 3"});
  expect_error(parse(with_tensor(p, "blk.0.gpu_bucket", GgmlType::I32, {2}, {0, 9})),
               {"blk.0.gpu_bucket", "lists 2 neurons", "gpu_idx marks 3"});
  expect_error(parse(with_tensor(p, "blk.0.gpu_bucket", GgmlType::I32, {3}, {3, 0, 9})),
               {"blk.0.gpu_bucket", "ascending"});
  std::vector<int32_t> idx = p.gpu_idx(1);
  idx[4] = 2;
  expect_error(parse(with_tensor(p, "blk.1.gpu_idx", GgmlType::I32, {10}, idx)),
               {"blk.1.gpu_idx", "element 4 is 2", "expected 0 or 1"});
  expect_error(parse(with_tensor(p, "blk.0.attn_gpu", GgmlType::I32, {1}, {7})),
               {"blk.0.attn_gpu", "is 7"});

  GgufWriter other;
  other.set("general.architecture", GgufValue::str("llama"));
  expect_error(parse(*other.serialize()), {"plan.gguf", "not a placement plan", "'llama'"});
  expect_error(parse({1, 2, 3}), {"plan.gguf"});

  auto bytes = serialize_plan(p);
  auto g = parse_gguf(*bytes);
  GgufWriter v2;
  for (const auto& [k, v] : g->kv) v2.set(k, v);
  v2.set("hotcold.plan.version", GgufValue::u32(2));
  expect_error(parse(*v2.serialize()), {"hotcold.plan.version is 2"});

  TempDir dir;
  auto missing = read_plan(dir.file("nope.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("nope.gguf"), std::string::npos) << missing.message();
}

TEST(PlacementPlan, PowerInferErrors) {
  const PlacementPlan p = sample_plan();
  GpuIdxFile f = gpuidx_from(p);
  f.bucket[2] = {1, 2};
  expect_error(parse(f.bytes()), {"blk.2.gpu_bucket", "lists 2 neurons", "gpu_idx marks 8"});
  f = gpuidx_from(p);
  f.idx[1] = std::vector<int32_t>(12, 0);
  expect_error(parse(f.bytes()), {"blk.1.gpu_idx", "expected I32 [10]", "found I32 [12]"});
  // A block_count that promises more layers than the file has.
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("generic.gpu_index"));
  w.set("generic.gpu_index.block_count", GgufValue::u32(2));
  const std::vector<int32_t> idx(10, 0);
  w.add_tensor({"blk.0.gpu_idx", {10}, GgmlType::I32, bytes_of(idx)});
  expect_error(parse(*w.serialize()), {"block_count is 2", "missing tensor 'blk.1.gpu_idx'"});
  // A layer beyond a gap.
  GgufWriter gap;
  gap.set("general.architecture", GgufValue::str("generic.gpu_index"));
  gap.add_tensor({"blk.0.gpu_idx", {10}, GgmlType::I32, bytes_of(idx)});
  gap.add_tensor({"blk.2.gpu_idx", {10}, GgmlType::I32, bytes_of(idx)});
  expect_error(parse(*gap.serialize()), {"blk.2.gpu_idx", "layer 1 has no gpu_idx"});
}

TEST(PlacementPlan, CachePathAndIdentity) {
  const std::string a = plan_cache_path("/cache", "m:1:2", "s:3:4", 1000);
  EXPECT_EQ(a, plan_cache_path("/cache", "m:1:2", "s:3:4", 1000));
  EXPECT_EQ(a.rfind("/cache/plan-", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("/cache/plan-0123456789abcdef.gguf").size()) << a;
  EXPECT_NE(a, plan_cache_path("/cache", "m:1:3", "s:3:4", 1000));
  EXPECT_NE(a, plan_cache_path("/cache", "m:1:2", "s:3:5", 1000));
  EXPECT_NE(a, plan_cache_path("/cache", "m:1:2", "s:3:4", 1001));
  EXPECT_NE(a, plan_cache_path("/cache", "m:1:2", "s:3:4", 1000, "ctx=4096"));
  EXPECT_NE(plan_cache_path("/c", "ab", "c", 1), plan_cache_path("/c", "a", "bc", 1));

  const PlacementPlan p = sample_plan();
  EXPECT_TRUE(check_plan_identity(p, p.model_id, p.stats_id, p.budget_bytes).ok());
  EXPECT_FALSE(check_plan_identity(p, "other", p.stats_id, p.budget_bytes).ok());
  EXPECT_FALSE(check_plan_identity(p, p.model_id, "other", p.budget_bytes).ok());
  EXPECT_FALSE(check_plan_identity(p, p.model_id, p.stats_id, 1).ok());
}

TEST(PlacementPlan, FileIdentityChangesWithTheFile) {
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  { std::ofstream(path) << "abc"; }
  auto a = file_identity(path);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->rfind("model.gguf:3:", 0), 0u) << *a;
  EXPECT_EQ(*file_identity(path), *a);
  { std::ofstream(path) << "abcd"; }
  EXPECT_NE(*file_identity(path), *a);
  EXPECT_FALSE(file_identity(dir.file("missing")).ok());
}

}  // namespace
}  // namespace hc::sparse
