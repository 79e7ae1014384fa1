#include "model/quantize_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "quant/quant.h"

namespace hc {

namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION

struct TargetEntry {
  const char* name;
  LlamaFtype ftype;
  GgmlType base;
  bool pure;
};

constexpr TargetEntry kTargets[] = {
    {"F32", LlamaFtype::ALL_F32, GgmlType::F32, true},
    {"F16", LlamaFtype::MOSTLY_F16, GgmlType::F16, true},
    {"BF16", LlamaFtype::MOSTLY_BF16, GgmlType::BF16, true},
    {"Q8_0", LlamaFtype::MOSTLY_Q8_0, GgmlType::Q8_0, false},
    {"Q4_0", LlamaFtype::MOSTLY_Q4_0, GgmlType::Q4_0, false},
    {"Q4_1", LlamaFtype::MOSTLY_Q4_1, GgmlType::Q4_1, false},
    {"Q5_0", LlamaFtype::MOSTLY_Q5_0, GgmlType::Q5_0, false},
    {"Q5_1", LlamaFtype::MOSTLY_Q5_1, GgmlType::Q5_1, false},
    {"Q4_K", LlamaFtype::MOSTLY_Q4_K_S, GgmlType::Q4_K, true},
    {"Q4_K_S", LlamaFtype::MOSTLY_Q4_K_S, GgmlType::Q4_K, false},
    {"Q4_K_M", LlamaFtype::MOSTLY_Q4_K_M, GgmlType::Q4_K, false},
    {"Q5_K", LlamaFtype::MOSTLY_Q5_K_S, GgmlType::Q5_K, true},
    {"Q5_K_S", LlamaFtype::MOSTLY_Q5_K_S, GgmlType::Q5_K, false},
    {"Q5_K_M", LlamaFtype::MOSTLY_Q5_K_M, GgmlType::Q5_K, false},
    {"Q6_K", LlamaFtype::MOSTLY_Q6_K, GgmlType::Q6_K, false},
};

bool is_quantized(GgmlType t) { return dtype_traits(t).block_size > 1; }
int64_t block_size(GgmlType t) { return dtype_traits(t).block_size; }
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// ggml_n_dims: trailing dimensions of size 1 do not count.
int n_dims(const std::vector<int64_t>& ne) {
  for (int i = static_cast<int>(ne.size()) - 1; i >= 1; --i)
    if (ne[i] > 1) return i + 1;
  return 1;
}

// Layer index from "blk.N.<...>", or -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t k = 4;
  int v = 0;
  bool any = false;
  while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])) && v < 1000000) {
    v = v * 10 + (name[k++] - '0');
    any = true;
  }
  return any && k < name.size() && name[k] == '.' ? v : -1;
}

// llama-quant.cpp's test of which tensors are converted at all.
bool should_convert(const GgufTensorInfo& t) {
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  if (n_dims(t.ne) < 2) return false;
  static const char* const kKeep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
      "ssm_conv1d.weight", "shortconv.conv.weight", "attn_rel_b.weight",
      "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
      "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
      "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
      "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight"};
  for (const char* k : kKeep)
    if (contains(n, k)) return false;
  return n != "position_embd.weight" && n != "token_types.weight";
}

// Model facts the mixture rules look at, plus llama.cpp's running counters.
struct MixState {
  std::string arch;
  int n_layer = 0;
  int n_expert = 0;
  bool is_70b = false;
  bool has_output = false;
  int n_attention_wv = 0;
  int i_attention_wv = 0;
  int i_ffn_down = 0;
};

MixState mix_state(const GgufFile& in) {
  MixState s;
  if (auto a = in.get_string("general.architecture"); a.ok()) s.arch = *a;
  // Malformed optional hyperparameters only weaken the heuristics; the loader reports them.
  if (auto v = in.get_u32_or(s.arch + ".block_count", 0); v.ok()) s.n_layer = static_cast<int>(*v);
  if (auto v = in.get_u32_or(s.arch + ".expert_count", 0); v.ok()) s.n_expert = static_cast<int>(*v);
  int max_layer = -1;
  for (const auto& t : in.tensors) {
    max_layer = std::max(max_layer, layer_of(t.name));
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
        contains(t.name, "attn_kv_b.weight"))
      ++s.n_attention_wv;
    if (t.name == "output.weight") s.has_output = true;
  }
  if (s.n_layer <= 0) s.n_layer = max_layer + 1;
  // llama.cpp's LLM_TYPE_70B: 80 layers with grouped-query attention.
  auto n_head = in.get_u32_or(s.arch + ".attention.head_count", 0);
  auto n_head_kv = in.get_u32_or(s.arch + ".attention.head_count_kv", 0);
  s.is_70b = s.arch == "llama" && s.n_layer == 80 && n_head.ok() && n_head_kv.ok() &&
             *n_head_kv != 0 && *n_head != *n_head_kv;
  return s;
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama_tensor_get_type restricted to the ftypes above (no imatrix, no overrides).
GgmlType mixture_type(MixState& qs, GgmlType new_type, const GgufTensorInfo& t, LlamaFtype ftype,
                      std::string* note) {
  using F = LlamaFtype;
  const std::string& name = t.name;
  const bool falcon = qs.arch == "falcon";
  const GgmlType before = new_type;
  if (name == "output.weight" || (!qs.has_output && name == "token_embd.weight")) {
    if (falcon || t.ne[0] % block_size(new_type) != 0) new_type = GgmlType::Q8_0;
    else if (new_type != GgmlType::Q8_0) new_type = GgmlType::Q6_K;
    if (new_type != before) *note = "output tensor";
  } else if (name == "token_embd.weight") {
    // unchanged for these ftypes
  } else if (contains(name, "attn_v.weight")) {
    if ((ftype == F::MOSTLY_Q4_K_M || ftype == F::MOSTLY_Q5_K_M) &&
        use_more_bits(qs.i_attention_wv, qs.n_attention_wv)) {
      new_type = GgmlType::Q6_K;
    } else if (ftype == F::MOSTLY_Q4_K_S && qs.i_attention_wv < 4) {
      new_type = GgmlType::Q5_K;
    }
    if (qs.is_70b && new_type == GgmlType::Q4_K) new_type = GgmlType::Q5_K;
    if (qs.n_expert == 8) new_type = GgmlType::Q8_0;
    if (new_type != before) *note = "attn_v #" + std::to_string(qs.i_attention_wv) + " gets more bits";
    ++qs.i_attention_wv;
  } else if (contains(name, "attn_k.weight")) {
    if (qs.n_expert == 8) new_type = GgmlType::Q8_0;
    if (new_type != before) *note = "attn_k of an 8-expert model";
  } else if (contains(name, "ffn_down")) {
    int i_layer = qs.i_ffn_down;
    const int n_layer = qs.n_layer;
    if (qs.n_expert > 1 && layer_of(name) >= 0) i_layer = layer_of(name);
    if (ftype == F::MOSTLY_Q4_K_M) {
      if (falcon) {
        new_type = i_layer < n_layer / 16         ? GgmlType::Q6_K
                   : use_more_bits(i_layer, n_layer) ? GgmlType::Q5_K
                                                     : GgmlType::Q4_K;
      } else if (use_more_bits(i_layer, n_layer)) {
        new_type = GgmlType::Q6_K;
      }
    } else if (ftype == F::MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer)) {
      new_type = GgmlType::Q6_K;
    } else if (ftype == F::MOSTLY_Q4_K_S && !falcon && i_layer < n_layer / 8) {
      new_type = GgmlType::Q5_K;
    }
    if (new_type != before) *note = "ffn_down of layer " + std::to_string(i_layer) + " gets more bits";
    ++qs.i_ffn_down;
  } else if (contains(name, "attn_output.weight")) {
    if (!falcon && qs.n_expert == 8 &&
        (ftype == F::MOSTLY_Q4_K_S || ftype == F::MOSTLY_Q4_K_M))
      new_type = GgmlType::Q5_K;
    if (new_type != before) *note = "attn_output of an 8-expert model";
  } else if (contains(name, "attn_qkv.weight")) {
    if (ftype == F::MOSTLY_Q4_K_M) new_type = GgmlType::Q5_K;
    else if (ftype == F::MOSTLY_Q5_K_M) new_type = GgmlType::Q6_K;
    if (new_type != before) *note = "fused attn_qkv gets more bits";
  }
  return new_type;
}

// A row length the block size does not divide: the nearest type the engine computes with.
GgmlType fallback_type(GgmlType t, int64_t nx, std::string* note) {
  if (nx % block_size(t) == 0) return t;
  GgmlType fb = GgmlType::F16;
  switch (t) {
    case GgmlType::Q4_K: fb = GgmlType::Q5_0; break;  // llama.cpp's fallbacks
    case GgmlType::Q5_K: fb = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fb = GgmlType::Q8_0; break;
    default: break;
  }
  if (nx % block_size(fb) != 0) fb = GgmlType::F16;
  std::string why = "row length " + std::to_string(nx) + " is not a multiple of " +
                    std::to_string(block_size(t)) + " (" + dtype_name(t) +
                    "): fallback to " + dtype_name(fb);
  *note = note->empty() ? why : *note + "; " + why;
  return fb;
}

// llama.cpp visits tensors sorted by layer, then by name; the mixture counters depend on it.
std::vector<size_t> llama_visit_order(const GgufFile& in) {
  std::vector<size_t> order(in.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const std::string& na = in.tensors[a].name;
    const std::string& nb = in.tensors[b].name;
    const int la = layer_of(na), lb = layer_of(nb);
    if (la != lb) return la < lb;
    return na < nb;
  });
  return order;
}

}  // namespace

Result<QuantizeTarget> parse_quantize_target(const std::string& name) {
  std::string up = name;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const TargetEntry& e : kTargets) {
    if (up == e.name) return QuantizeTarget{e.name, e.ftype, e.base, e.pure};
  }
  return Status::Error("unknown quantization type '" + name + "' (expected one of " +
                       quantize_target_names() + ")");
}

std::string llama_ftype_name(uint32_t ftype) {
  // llama.cpp's llama_ftype enumeration (include/llama.h); gaps are values it removed.
  static const std::pair<uint32_t, const char*> kNames[] = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"}, {39, "NVFP4"}, {40, "Q1_0"}};
  for (const auto& [v, name] : kNames)
    if (v == ftype) return name;
  return {};
}

std::string quantize_target_names() {
  std::string out;
  for (const TargetEntry& e : kTargets) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

Result<std::vector<TensorQuantPlan>> plan_quantization(const GgufFile& in,
                                                       const QuantizeTarget& target) {
  MixState qs = mix_state(in);
  std::vector<TensorQuantPlan> plan(in.tensors.size());
  for (size_t idx : llama_visit_order(in)) {
    const GgufTensorInfo& t = in.tensors[idx];
    TensorQuantPlan& p = plan[idx];
    p.name = t.name;
    p.from = p.to = t.type;
    if (!should_convert(t)) continue;
    GgmlType to = target.base;
    if (!target.pure && is_quantized(target.base))
      to = mixture_type(qs, to, t, target.ftype, &p.note);
    to = fallback_type(to, t.ne[0], &p.note);
    p.to = to;
    p.convert = to != t.type;
    if (!p.convert) continue;
    if (!quant::is_supported_weight_type(t.type))
      return Status::Error("tensor '" + t.name + "': cannot convert from type " +
                           dtype_name(t.type) +
                           " (supported input types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                           "Q5_1, Q4_K, Q5_K, Q6_K)");
    HC_CHECK(quant::can_quantize_to(to));
  }
  return plan;
}

namespace {

// Converts one tensor row by row; each thread owns a contiguous range of output rows.
Status convert_tensor(const GgufTensorInfo& t, GgmlType to, ThreadPool* pool,
                      std::vector<uint8_t>* out) {
  const int64_t nx = t.ne[0];
  const int64_t n_rows = nx > 0 ? t.n_elements() / nx : 0;
  const int64_t in_row = row_bytes(t.type, nx);
  const int64_t out_row = row_bytes(to, nx);
  out->assign(static_cast<size_t>(n_rows * out_row), 0);
  const int nth = pool ? pool->size() : 1;
  std::vector<std::vector<float>> scratch(nth, std::vector<float>(static_cast<size_t>(nx)));
  std::vector<int64_t> first_bad_row(nth, -1);  // one slot per thread: no shared writes
  auto work = [&](int ith, int n_threads) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(n_rows, ith, n_threads, &r0, &r1);
    float* row = scratch[ith].data();  // [nx] f32, this thread's row buffer
    for (int64_t r = r0; r < r1; ++r) {
      quant::dequantize_row(t.type, t.data + r * in_row, row, nx);
      for (int64_t k = 0; k < nx; ++k) {
        if (!std::isfinite(row[k])) {
          first_bad_row[ith] = r;
          return;
        }
      }
      quant::quantize_row(to, row, out->data() + r * out_row, nx);
    }
  };
  if (pool) pool->run(work);
  else work(0, 1);
  for (int64_t r : first_bad_row) {
    if (r >= 0)
      return Status::Error("tensor '" + t.name + "': row " + std::to_string(r) +
                           " holds a NaN or infinite value (expected finite weights)");
  }
  return Status::Ok();
}

Status copy_metadata(const GgufFile& in, const QuantizeTarget& target, GgufWriter* w) {
  for (const auto& [key, v] : in.kv) {
    if (key == "split.count") {
      auto n = in.get_u32("split.count");
      if (n.ok() && *n > 1)
        return Status::Error("split GGUF models are not supported (split.count = " +
                             std::to_string(*n) + ", expected 1); merge the shards first");
    }
    // The writer emits general.alignment itself; split keys describe the input's shards.
    if (key == "general.alignment" || key.rfind("split.", 0) == 0) continue;
    w->kv.emplace_back(key, v);
  }
  w->set("general.quantization_version", GgufValue::u32(kQuantizationVersion));
  w->set("general.file_type", GgufValue::u32(static_cast<uint32_t>(target.ftype)));
  return Status::Ok();
}

}  // namespace

Result<QuantizedModel> quantize_model(const GgufFile& in, const QuantizeTarget& target,
                                      ThreadPool* pool, const QuantizeProgress& progress) {
  QuantizedModel m;
  HC_ASSIGN_OR_RETURN(m.plan, plan_quantization(in, target));
  m.writer.version = 3;
  m.writer.alignment = in.alignment;
  HC_TRY(copy_metadata(in, target, &m.writer));
  m.buffers.reserve(in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const GgufTensorInfo& t = in.tensors[i];
    const TensorQuantPlan& p = m.plan[i];
    std::span<const uint8_t> data(t.data, static_cast<size_t>(t.nbytes));
    if (p.convert) {
      m.buffers.emplace_back();
      HC_TRY(convert_tensor(t, p.to, pool, &m.buffers.back()));
      data = m.buffers.back();
    }
    m.writer.add_tensor(GgufTensorToWrite{t.name, t.ne, p.to, data});
    m.bytes_in += t.nbytes;
    m.bytes_out += data.size();
    if (progress) progress(i, in.tensors.size(), p, data.size());
  }
  return m;
}

}  // namespace hc
