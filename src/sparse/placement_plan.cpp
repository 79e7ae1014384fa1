#include "sparse/placement_plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/mmap.h"

namespace hc::sparse {

namespace {

constexpr char kArch[] = "hotcold-plan";
constexpr char kPowerInferArch[] = "generic.gpu_index";
constexpr uint32_t kVersion = 1;

std::string layer_tensor(int il, const char* what) {
  return "blk." + std::to_string(il) + "." + what;
}

std::string shape_of(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

std::span<const uint8_t> as_bytes(const std::vector<int32_t>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(int32_t)};
}

// The elements of a 1-D I32 tensor, which must exist and, when n >= 0, have n elements.
Result<std::vector<int32_t>> read_i32(const GgufFile& g, const std::string& name, int64_t n) {
  const GgufTensorInfo* t = g.find_tensor(name);
  if (t == nullptr) return Status::Error("missing tensor '" + name + "'");
  const bool shape_ok = t->ne.size() == 1 && (n < 0 || t->ne[0] == n);
  if (t->type != GgmlType::I32 || !shape_ok)
    return Status::Error("tensor '" + name + "': expected I32 [" +
                         (n < 0 ? std::string("n") : std::to_string(n)) + "], found " +
                         dtype_name(t->type) + " " + shape_of(t->ne));
  std::vector<int32_t> v(static_cast<size_t>(t->ne[0]));
  if (!v.empty()) std::memcpy(v.data(), t->data, v.size() * sizeof(int32_t));
  return v;
}

// gpu_idx [n_ff] of 0/1 -> ascending list of the ones.
Result<std::vector<int32_t>> hot_from_idx(const std::vector<int32_t>& idx,
                                          const std::string& name) {
  std::vector<int32_t> hot;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] != 0 && idx[i] != 1)
      return Status::Error("tensor '" + name + "': element " + std::to_string(i) + " is " +
                           std::to_string(idx[i]) + ", expected 0 or 1");
    if (idx[i] == 1) hot.push_back(static_cast<int32_t>(i));
  }
  return hot;
}

// A gpu_bucket must list exactly the neurons gpu_idx marks, ascending.
Status check_bucket(const std::vector<int32_t>& bucket, const std::vector<int32_t>& hot,
                    int64_t n_ff, const std::string& name) {
  for (size_t j = 0; j < bucket.size(); ++j) {
    if (bucket[j] < 0 || bucket[j] >= n_ff)
      return Status::Error("tensor '" + name + "': element " + std::to_string(j) + " is neuron " +
                           std::to_string(bucket[j]) + ", out of range [0, " +
                           std::to_string(n_ff) + ")");
    if (j > 0 && bucket[j] <= bucket[j - 1])
      return Status::Error("tensor '" + name + "': expected ascending neuron indices, found " +
                           std::to_string(bucket[j - 1]) + " then " + std::to_string(bucket[j]));
  }
  if (bucket.size() != hot.size())
    return Status::Error("tensor '" + name + "' lists " + std::to_string(bucket.size()) +
                         " neurons, but gpu_idx marks " + std::to_string(hot.size()));
  for (size_t j = 0; j < bucket.size(); ++j)
    if (bucket[j] != hot[j])
      return Status::Error("tensor '" + name + "' is inconsistent with gpu_idx: it lists neuron " +
                           std::to_string(bucket[j]) + " at position " + std::to_string(j) +
                           ", where gpu_idx has neuron " + std::to_string(hot[j]));
  return Status::Ok();
}

// One layer: gpu_idx (n_ff elements; n_ff < 0: take its length), gpu_bucket (required or not).
Result<std::vector<int32_t>> read_layer_hot(const GgufFile& g, int il, int64_t n_ff,
                                            bool bucket_required) {
  const std::string idx_name = layer_tensor(il, "gpu_idx");
  const std::string bucket_name = layer_tensor(il, "gpu_bucket");
  HC_ASSIGN_OR_RETURN(std::vector<int32_t> idx, read_i32(g, idx_name, n_ff));
  HC_ASSIGN_OR_RETURN(std::vector<int32_t> hot, hot_from_idx(idx, idx_name));
  if (!bucket_required && g.find_tensor(bucket_name) == nullptr) return hot;
  HC_ASSIGN_OR_RETURN(std::vector<int32_t> bucket, read_i32(g, bucket_name, -1));
  HC_TRY(check_bucket(bucket, hot, static_cast<int64_t>(idx.size()), bucket_name));
  return hot;
}

Result<bool> read_attn(const GgufFile& g, int il) {
  const std::string name = layer_tensor(il, "attn_gpu");
  HC_ASSIGN_OR_RETURN(std::vector<int32_t> a, read_i32(g, name, 1));
  if (a[0] != 0 && a[0] != 1)
    return Status::Error("tensor '" + name + "' is " + std::to_string(a[0]) + ", expected 0 or 1");
  return a[0] == 1;
}

Result<PlacementPlan> read_hotcold_plan(const GgufFile& g) {
  HC_ASSIGN_OR_RETURN(uint32_t version, g.get_u32("hotcold.plan.version"));
  if (version != kVersion)
    return Status::Error("hotcold.plan.version is " + std::to_string(version) +
                         ", this build reads version " + std::to_string(kVersion));
  PlacementPlan p;
  HC_ASSIGN_OR_RETURN(uint32_t n_layer, g.get_u32("hotcold.plan.n_layer"));
  HC_ASSIGN_OR_RETURN(uint32_t n_ff, g.get_u32("hotcold.plan.n_ff"));
  if (n_layer < 1 || n_layer > 65536 || n_ff < 1 || n_ff > (1u << 24))
    return Status::Error("implausible shape: n_layer " + std::to_string(n_layer) + ", n_ff " +
                         std::to_string(n_ff));
  HC_ASSIGN_OR_RETURN(p.model_id, g.get_string("hotcold.plan.model"));
  HC_ASSIGN_OR_RETURN(p.stats_id, g.get_string("hotcold.plan.stats"));
  HC_ASSIGN_OR_RETURN(p.solver, g.get_string("hotcold.plan.solver"));
  HC_ASSIGN_OR_RETURN(p.budget_bytes, g.get_u64("hotcold.plan.budget_bytes"));
  HC_ASSIGN_OR_RETURN(p.predicted_tok_s, g.get_f32("hotcold.plan.predicted_tok_s"));
  if (g.find("hotcold.plan.unit")) {
    HC_ASSIGN_OR_RETURN(std::string unit, g.get_string("hotcold.plan.unit"));
    if (unit != "expert" && unit != "neuron")
      return Status::Error("hotcold.plan.unit is '" + unit + "', expected 'neuron' or 'expert'");
    p.experts = unit == "expert";
  }
  p.n_ff = n_ff;
  p.layers.resize(n_layer);
  for (int il = 0; il < static_cast<int>(n_layer); ++il) {
    HC_ASSIGN_OR_RETURN(p.layers[static_cast<size_t>(il)].hot,
                        read_layer_hot(g, il, n_ff, /*bucket_required=*/true));
    HC_ASSIGN_OR_RETURN(p.layers[static_cast<size_t>(il)].attn_on_device, read_attn(g, il));
  }
  return p;
}

// PowerInfer's gpuidx: layers blk.0.. counted by name (block_count when present must agree);
// n_ff from blk.0.gpu_idx, the same for every layer.
Result<PlacementPlan> read_powerinfer_plan(const GgufFile& g) {
  int n_layer = 0;
  while (g.find_tensor(layer_tensor(n_layer, "gpu_idx")) != nullptr) ++n_layer;
  if (n_layer == 0) return Status::Error("missing tensor 'blk.0.gpu_idx'");
  const std::string count_key = std::string(kPowerInferArch) + ".block_count";
  if (g.find(count_key) != nullptr) {
    HC_ASSIGN_OR_RETURN(uint32_t declared, g.get_u32(count_key));
    if (declared != static_cast<uint32_t>(n_layer))
      return Status::Error(count_key + " is " + std::to_string(declared) + ", but the file has " +
                           "gpu_idx tensors for layers 0.." + std::to_string(n_layer - 1) +
                           (declared > static_cast<uint32_t>(n_layer)
                                ? " (missing tensor '" + layer_tensor(n_layer, "gpu_idx") + "')"
                                : std::string()));
  }
  for (const GgufTensorInfo& t : g.tensors) {
    int il = -1;
    char tail[16] = {};
    if (std::sscanf(t.name.c_str(), "blk.%d.%15s", &il, tail) == 2 && il >= n_layer)
      return Status::Error("tensor '" + t.name + "' belongs to layer " + std::to_string(il) +
                           ", but layer " + std::to_string(n_layer) + " has no gpu_idx");
  }
  PlacementPlan p;
  p.solver = "powerinfer";
  p.n_ff = g.find_tensor("blk.0.gpu_idx")->ne.empty() ? 0 : g.find_tensor("blk.0.gpu_idx")->ne[0];
  if (p.n_ff < 1) return Status::Error("tensor 'blk.0.gpu_idx' is empty, expected [n_ff]");
  p.layers.resize(static_cast<size_t>(n_layer));
  for (int il = 0; il < n_layer; ++il) {
    HC_ASSIGN_OR_RETURN(p.layers[static_cast<size_t>(il)].hot,
                        read_layer_hot(g, il, p.n_ff, /*bucket_required=*/false));
  }
  if (g.find("split.vram_capacity") != nullptr) {
    HC_ASSIGN_OR_RETURN(p.budget_bytes, g.get_u64("split.vram_capacity"));
  }
  return p;
}

uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return (h ^ 0xff) * 0x100000001b3ull;  // field separator: "ab"+"c" != "a"+"bc"
}

}  // namespace

int64_t PlacementPlan::n_hot_total() const {
  int64_t n = 0;
  for (const LayerPlacement& l : layers) n += static_cast<int64_t>(l.hot.size());
  return n;
}

std::vector<int32_t> PlacementPlan::gpu_idx(int il) const {
  std::vector<int32_t> idx(static_cast<size_t>(n_ff), 0);
  for (int32_t i : layers[static_cast<size_t>(il)].hot) idx[static_cast<size_t>(i)] = 1;
  return idx;
}

Status PlacementPlan::validate() const {
  if (n_ff < 1) return Status::Error("plan: n_ff is " + std::to_string(n_ff) + ", expected >= 1");
  for (int il = 0; il < n_layer(); ++il) {
    const std::vector<int32_t>& h = layers[static_cast<size_t>(il)].hot;
    for (size_t j = 0; j < h.size(); ++j) {
      if (h[j] < 0 || h[j] >= n_ff || (j > 0 && h[j] <= h[j - 1]))
        return Status::Error("plan: layer " + std::to_string(il) + ": device neuron " +
                             std::to_string(h[j]) + " at position " + std::to_string(j) +
                             " is out of range [0, " + std::to_string(n_ff) +
                             ") or not ascending");
    }
  }
  return Status::Ok();
}

Status PlacementPlan::check_matches(int n_layer_model, int64_t n_ff_model,
                                   bool experts_model) const {
  const auto unit = [](bool e) { return e ? std::string("experts") : std::string("n_ff"); };
  if (experts != experts_model)
    return Status::Error(std::string("plan places ") + (experts ? "experts" : "FFN neurons") +
                         "; the model has " +
                         (experts_model ? "experts (a mixture-of-experts model)" : "a dense FFN"));
  if (n_layer() != n_layer_model || n_ff != n_ff_model)
    return Status::Error("plan has n_layer " + std::to_string(n_layer()) + ", " + unit(experts) +
                         " " + std::to_string(n_ff) + "; the model has n_layer " +
                         std::to_string(n_layer_model) + ", " + unit(experts_model) + " " +
                         std::to_string(n_ff_model));
  return Status::Ok();
}

PlacementPlan empty_plan(int n_layer, int64_t n_ff) {
  PlacementPlan p;
  p.n_ff = n_ff;
  p.layers.resize(static_cast<size_t>(n_layer));
  return p;
}

Result<std::vector<uint8_t>> serialize_plan(const PlacementPlan& plan) {
  HC_TRY(plan.validate());
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(kArch));
  w.set("hotcold.plan.version", GgufValue::u32(kVersion));
  w.set("hotcold.plan.model", GgufValue::str(plan.model_id));
  w.set("hotcold.plan.stats", GgufValue::str(plan.stats_id));
  w.set("hotcold.plan.budget_bytes", GgufValue::u64(plan.budget_bytes));
  w.set("hotcold.plan.predicted_tok_s", GgufValue::f32(plan.predicted_tok_s));
  w.set("hotcold.plan.solver", GgufValue::str(plan.solver));
  w.set("hotcold.plan.n_layer", GgufValue::u32(static_cast<uint32_t>(plan.n_layer())));
  w.set("hotcold.plan.n_ff", GgufValue::u32(static_cast<uint32_t>(plan.n_ff)));
  if (plan.experts) w.set("hotcold.plan.unit", GgufValue::str("expert"));
  // Tensor data must outlive serialize(): [n_layer][3] vectors.
  std::vector<std::vector<int32_t>> store;
  store.reserve(static_cast<size_t>(plan.n_layer()) * 3);
  for (int il = 0; il < plan.n_layer(); ++il) {
    const LayerPlacement& l = plan.layers[static_cast<size_t>(il)];
    store.push_back(plan.gpu_idx(il));
    w.add_tensor({layer_tensor(il, "gpu_idx"), {plan.n_ff}, GgmlType::I32, as_bytes(store.back())});
    store.push_back(l.hot);
    w.add_tensor({layer_tensor(il, "gpu_bucket"),
                  {static_cast<int64_t>(l.hot.size())},
                  GgmlType::I32,
                  as_bytes(store.back())});
    store.push_back({l.attn_on_device ? 1 : 0});
    w.add_tensor({layer_tensor(il, "attn_gpu"), {1}, GgmlType::I32, as_bytes(store.back())});
  }
  return w.serialize();
}

Status write_plan(const std::string& path, const PlacementPlan& plan) {
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize_plan(plan));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::Error("cannot open '" + path + "' for writing");
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !wrote) return Status::Error("error writing '" + path + "'");
  return Status::Ok();
}

Result<PlacementPlan> plan_from_gguf(const GgufFile& g) {
  const GgufValue* arch = g.find("general.architecture");
  const std::string* arch_s =
      arch && arch->type == GgufType::STRING ? std::get_if<std::string>(&arch->scalar) : nullptr;
  if (arch_s != nullptr && *arch_s == kArch) return read_hotcold_plan(g);
  if (arch_s != nullptr && *arch_s == kPowerInferArch) return read_powerinfer_plan(g);
  return Status::Error(std::string("not a placement plan: general.architecture is ") +
                       (arch_s ? "'" + *arch_s + "'" : std::string("missing")) + ", expected '" +
                       kArch + "' (hotcold plan) or '" + kPowerInferArch +
                       "' (PowerInfer .gpuidx)");
}

Result<PlacementPlan> parse_plan(std::span<const uint8_t> bytes, const std::string& name) {
  auto g = parse_gguf(bytes);
  if (!g.ok()) return g.status().with_context("'" + name + "'");
  auto p = plan_from_gguf(*g);
  if (!p.ok()) return p.status().with_context("'" + name + "'");
  return p;
}

Result<PlacementPlan> read_plan(const std::string& path) {
  HC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  return parse_plan(file.bytes(), path);
}

Status check_plan_identity(const PlacementPlan& plan, const std::string& model_id,
                           const std::string& stats_id, uint64_t budget_bytes) {
  if (plan.model_id != model_id)
    return Status::Error("plan was made for model '" + plan.model_id + "', not '" + model_id + "'");
  if (plan.stats_id != stats_id)
    return Status::Error("plan was made from statistics '" + plan.stats_id + "', not '" +
                         stats_id + "'");
  if (plan.budget_bytes != budget_bytes)
    return Status::Error("plan was made for a budget of " + std::to_string(plan.budget_bytes) +
                         " bytes, not " + std::to_string(budget_bytes));
  return Status::Ok();
}

Result<std::string> file_identity(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::Error("cannot stat '" + path + "': " + ec.message());
  const fs::file_time_type mtime = fs::last_write_time(path, ec);
  if (ec) return Status::Error("cannot stat '" + path + "': " + ec.message());
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  return fs::path(path).filename().string() + ":" + std::to_string(size) + ":" +
         std::to_string(ns);
}

std::string plan_cache_path(const std::string& dir, const std::string& model_id,
                            const std::string& stats_id, uint64_t budget_bytes,
                            const std::string& extra) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(h, "hotcold-plan v" + std::to_string(kVersion));
  h = fnv1a(h, model_id);
  h = fnv1a(h, stats_id);
  h = fnv1a(h, std::to_string(budget_bytes));
  h = fnv1a(h, extra);
  char name[40];
  std::snprintf(name, sizeof name, "plan-%016" PRIx64 ".gguf", h);
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace hc::sparse
