#include "model/llama_model.h"

#include <sys/mman.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/log.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"

namespace hc {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The FFN activation, in this order:
//   - our key `<arch>.feed_forward_activation` or `hotcold.ffn_activation` (relu, drelu, silu);
//   - the `bamboo` architecture (Bamboo, TurboSparse) is dReLU, as PowerInfer computes it
//     (llama.cpp: LLM_FFN_SYM with LLM_FFN_RELU, dense and sparse alike);
//   - a PowerInfer file (magic "PWRI") of the llama architecture is ReGLU whatever its name:
//     PowerInfer's sparse path always applies ReLU to the gate (llm_build_ffn_sparse);
//   - ReLU-family checkpoints converted as plain llama GGUF carry only their name as a hint:
//     "bamboo" / "turbosparse" dReLU, "relu" / "prosparse" ReGLU;
//   - else SiLU (llama.cpp's llama).
//   Falcon's FFN is ungated: GELU (llama.cpp's falcon) unless the key, a PowerInfer file (its
//   sparse falcon applies ReLU) or a "relu" name says ReLU (ReluFalcon).
//   OPT's FFN is ungated ReLU (the key may only say so).
Result<FfnActivation> detect_activation(const GgufFile& f, const std::string& arch) {
  const bool gated = arch != "falcon" && arch != "opt";
  for (const std::string& key : {arch + ".feed_forward_activation", std::string("hotcold.ffn_activation")}) {
    if (!f.find(key)) continue;
    HC_ASSIGN_OR_RETURN(std::string act, f.get_string(key));
    act = lower(act);
    if (act == "relu") return FfnActivation::kRelu;
    if (gated && act == "drelu") return FfnActivation::kDRelu;
    if (gated && (act == "silu" || act == "swiglu")) return FfnActivation::kSilu;
    if (arch == "falcon" && act == "gelu") return FfnActivation::kGelu;
    return Status::Error("metadata '" + key + "': expected " +
                         (gated             ? std::string("'relu', 'drelu' or 'silu'")
                          : arch == "falcon" ? "'relu' or 'gelu' (the falcon FFN has no gate)"
                                             : "'relu' (the " + arch + " FFN is ReLU, ungated)") +
                         ", found '" + act + "'");
  }
  if (arch == "bamboo") return FfnActivation::kDRelu;
  if (f.powerinfer_magic || arch == "opt") return FfnActivation::kRelu;
  const GgufValue* name = f.find("general.name");
  if (name && !name->is_array() && std::holds_alternative<std::string>(name->scalar)) {
    const std::string n = lower(std::get<std::string>(name->scalar));
    if (gated && (n.find("bamboo") != std::string::npos || n.find("turbosparse") != std::string::npos))
      return FfnActivation::kDRelu;
    if (n.find("relu") != std::string::npos || (gated && n.find("prosparse") != std::string::npos))
      return FfnActivation::kRelu;
  }
  return gated ? FfnActivation::kSilu : FfnActivation::kGelu;
}

template <typename T>
void release(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

// Releases the whole pages of the mapped file below byte `end` from this process (they stay in
// the page cache; touching them again faults them back in).
void drop_pages(std::span<const uint8_t> file, uint64_t end) {
  const long page = sysconf(_SC_PAGESIZE);
  const auto begin = reinterpret_cast<uintptr_t>(file.data());
  if (page <= 0 || begin % page != 0) return;
  const uint64_t n = std::min<uint64_t>(end, file.size()) / page * page;
  if (n > 0) madvise(const_cast<uint8_t*>(file.data()), n, MADV_DONTNEED);
}

Status positive(const char* what, int v) {
  if (v > 0 && v < (1 << 24)) return Status::Ok();
  return Status::Error(std::string("hyperparameter ") + what + " = " + std::to_string(v) +
                       " (expected a positive value below 2^24)");
}

// Mixture of experts, as llama.cpp reads it: `expert_count` experts of which
// `expert_used_count` are used per token (a per-layer array must hold one value: hotcold runs
// the same count in every layer). llama.cpp's llama (Mixtral) and qwen3moe route by softmax over
// all experts and normalise the chosen weights (norm_w = true, no scale key read); qwen3moe's
// expert width is `expert_feed_forward_length` (else n_ff / n_expert_used, as llama.cpp), llama's
// is feed_forward_length.
Status read_experts(const GgufFile& f, const std::string& a, LlamaHParams* hp) {
  const bool moe_arch = hp->arch == "qwen3moe";
  const bool moe_capable = moe_arch || hp->arch == "llama" || hp->arch == "mistral";
  HC_ASSIGN_OR_RETURN(uint32_t n_expert, f.get_u32_or(a + "expert_count", 0));
  if (n_expert == 0) {
    if (moe_arch)
      return Status::Error("metadata '" + a + "expert_count': expected a positive expert count "
                           "for " + hp->arch + ", found " + (f.find(a + "expert_count") ? "0" : "none"));
    return Status::Ok();
  }
  if (!moe_capable)
    return Status::Error("metadata '" + a + "expert_count' = " + std::to_string(n_expert) +
                         ": hotcold runs experts in llama (Mixtral) and qwen3moe files, not " +
                         hp->arch);
  if (n_expert > 512)
    return Status::Error("metadata '" + a + "expert_count' = " + std::to_string(n_expert) +
                         " (expected at most 512, llama.cpp's LLAMA_MAX_EXPERTS)");
  uint32_t n_used = 0;
  const std::string used_key = a + "expert_used_count";
  const GgufValue* used = f.find(used_key);
  if (used && used->is_array()) {
    HC_ASSIGN_OR_RETURN(std::vector<int32_t> per_layer, f.get_i32_array(used_key));
    if (per_layer.empty() || per_layer[0] < 0 ||
        std::any_of(per_layer.begin(), per_layer.end(), [&](int32_t v) { return v != per_layer[0]; }))
      return Status::Error("metadata '" + used_key + "': expected one expert count for every "
                           "layer (hotcold does not run per-layer counts)");
    n_used = static_cast<uint32_t>(per_layer[0]);
  } else {
    HC_ASSIGN_OR_RETURN(n_used, f.get_u32_or(used_key, 0));
  }
  if (n_used == 0 || n_used > n_expert)
    return Status::Error("metadata '" + used_key + "' = " + std::to_string(n_used) +
                         ": expected 1.." + std::to_string(n_expert) + " (the file's " +
                         a + "expert_count)");
  hp->n_expert = static_cast<int>(n_expert);
  hp->n_expert_used = static_cast<int>(n_used);
  hp->moe_gating = MoeGating::kSoftmax;
  hp->moe_norm_w = true;
  hp->moe_w_scale = 0.0f;
  if (moe_arch) {
    HC_ASSIGN_OR_RETURN(uint32_t n_ff_exp, f.get_u32_or(a + "expert_feed_forward_length", 0));
    hp->n_ff = n_ff_exp ? static_cast<int>(n_ff_exp) : hp->n_ff / hp->n_expert_used;
    HC_TRY(positive("expert_feed_forward_length", hp->n_ff));
  }
  return Status::Ok();
}

}  // namespace

const char* activation_name(FfnActivation a) {
  switch (a) {
    case FfnActivation::kRelu: return "relu";
    case FfnActivation::kDRelu: return "drelu";
    case FfnActivation::kGelu: return "gelu";
    case FfnActivation::kSilu: break;
  }
  return "silu";
}

Result<LlamaHParams> LlamaHParams::from_gguf(const GgufFile& f) {
  LlamaHParams hp;
  HC_ASSIGN_OR_RETURN(hp.arch, f.get_string("general.architecture"));
  static const char* kArchs[] = {"llama", "mistral", "bamboo", "falcon", "opt",
                                 "qwen2", "qwen3", "qwen3moe"};
  if (std::find(std::begin(kArchs), std::end(kArchs), hp.arch) == std::end(kArchs))
    return Status::Error("unsupported architecture '" + hp.arch +
                         "' (expected one of: llama, mistral, bamboo, falcon, opt, qwen2, qwen3, "
                         "qwen3moe)");
  const bool falcon = hp.arch == "falcon", opt = hp.arch == "opt";
  const bool qwen = hp.arch.rfind("qwen", 0) == 0;
  const std::string a = hp.arch + ".";
  HC_ASSIGN_OR_RETURN(uint32_t n_ctx, f.get_u32(a + "context_length"));
  HC_ASSIGN_OR_RETURN(uint32_t n_embd, f.get_u32(a + "embedding_length"));
  HC_ASSIGN_OR_RETURN(uint32_t n_layer, f.get_u32(a + "block_count"));
  HC_ASSIGN_OR_RETURN(uint32_t n_ff, f.get_u32(a + "feed_forward_length"));
  HC_ASSIGN_OR_RETURN(uint32_t n_head, f.get_u32(a + "attention.head_count"));
  HC_ASSIGN_OR_RETURN(uint32_t n_head_kv, f.get_u32_or(a + "attention.head_count_kv", n_head));
  hp.n_ctx_train = static_cast<int>(n_ctx);
  hp.n_embd = static_cast<int>(n_embd);
  hp.n_layer = static_cast<int>(n_layer);
  hp.n_ff = static_cast<int>(n_ff);
  hp.n_head = static_cast<int>(n_head);
  hp.n_head_kv = static_cast<int>(n_head_kv);
  for (auto [what, v] : {std::pair{"context_length", hp.n_ctx_train}, {"embedding_length", hp.n_embd},
                         {"block_count", hp.n_layer}, {"feed_forward_length", hp.n_ff},
                         {"head_count", hp.n_head}, {"head_count_kv", hp.n_head_kv}})
    HC_TRY(positive(what, v));
  if (hp.n_head % hp.n_head_kv != 0)
    return Status::Error("head_count " + std::to_string(hp.n_head) +
                         " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  HC_ASSIGN_OR_RETURN(uint32_t key_len, f.get_u32_or(a + "attention.key_length", n_embd / n_head));
  hp.head_dim = static_cast<int>(key_len);
  if (hp.head_dim <= 0 || hp.head_dim > 512 || hp.head_dim % 2)
    return Status::Error("head dimension " + std::to_string(hp.head_dim) +
                         " (expected an even value in 2..512)");
  HC_ASSIGN_OR_RETURN(uint32_t value_len, f.get_u32_or(a + "attention.value_length", key_len));
  if (value_len != key_len)
    return Status::Error("attention.value_length " + std::to_string(value_len) +
                         " differs from attention.key_length " + std::to_string(key_len) +
                         " (expected equal head sizes for K and V)");
  HC_ASSIGN_OR_RETURN(uint32_t n_rot, f.get_u32_or(a + "rope.dimension_count", key_len));
  hp.n_rot = opt ? 0 : static_cast<int>(n_rot);  // opt: learned positions, no RoPE
  if (!opt && (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2))
    return Status::Error("rope.dimension_count " + std::to_string(hp.n_rot) +
                         " (expected an even value <= head dimension " +
                         std::to_string(hp.head_dim) + ")");
  if (falcon) {
    // llama.cpp's falcon: LayerNorm (its eps key is required there too), NeoX RoPE, parallel
    // attention and FFN, ungated FFN.
    HC_ASSIGN_OR_RETURN(hp.rms_eps, f.get_f32(a + "attention.layer_norm_epsilon"));
    hp.norm = NormKind::kLayer;
    hp.parallel_block = true;
    hp.rope_neox = true;
    hp.ffn_gated = false;
  } else if (opt) {
    // PowerInfer's OPT (its only OPT layout is PWRI): LayerNorm whose eps it never reads (0,
    // its zero-initialised hparams) unless the file says; learned positions; ungated ReLU FFN
    // with biases.
    HC_ASSIGN_OR_RETURN(hp.rms_eps, f.get_f32_or(a + "attention.layer_norm_epsilon", 0.0f));
    hp.norm = NormKind::kLayer;
    hp.ffn_gated = false;
    hp.learned_pos = true;
  } else {
    HC_ASSIGN_OR_RETURN(hp.rms_eps, f.get_f32_or(a + "attention.layer_norm_rms_epsilon", 1e-5f));
    // llama.cpp's qwen2 / qwen3 / qwen3moe: NeoX RoPE; qwen3's Q and K heads are RMS-normed.
    hp.rope_neox = qwen;
    hp.qk_norm = hp.arch == "qwen3" || hp.arch == "qwen3moe";
  }
  HC_TRY(read_experts(f, a, &hp));
  HC_ASSIGN_OR_RETURN(hp.rope_freq_base, f.get_f32_or(a + "rope.freq_base", 10000.0f));
  if (f.find(a + "rope.scaling.type")) {
    HC_ASSIGN_OR_RETURN(std::string st, f.get_string(a + "rope.scaling.type"));
    if (st == "linear") {
      HC_ASSIGN_OR_RETURN(float factor, f.get_f32_or(a + "rope.scaling.factor", 1.0f));
      if (factor > 0) hp.rope_freq_scale = 1.0f / factor;
    } else if (st != "none") {
      return Status::Error("rope.scaling.type '" + st + "' is not supported (expected none or linear)");
    }
  }
  HC_ASSIGN_OR_RETURN(hp.ffn_act, detect_activation(f, hp.arch));
  HC_ASSIGN_OR_RETURN(hp.sparse_threshold, f.get_f32_or("powerinfer.sparse_threshold", 0.0f));
  if (f.find("hotcold.predictor.thresholds")) {
    HC_ASSIGN_OR_RETURN(hp.predictor_thresholds, f.get_f32_array("hotcold.predictor.thresholds"));
    if (static_cast<int>(hp.predictor_thresholds.size()) != hp.n_layer)
      return Status::Error("hotcold.predictor.thresholds: expected " + std::to_string(hp.n_layer) +
                           " values (one per layer), found " +
                           std::to_string(hp.predictor_thresholds.size()));
    std::string input = "normed";
    if (f.find("hotcold.predictor.input")) {
      HC_ASSIGN_OR_RETURN(input, f.get_string("hotcold.predictor.input"));
      if (input != "residual")
        return Status::Error("hotcold.predictor.input: expected 'residual', found '" + input + "'");
    }
    hp.predictor_normed_input = input != "residual";
  }
  return hp;
}

Result<std::shared_ptr<const LlamaModel>> LlamaModel::load(const std::string& path,
                                                           const LoadOptions& opt) {
  HC_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::open(path));
  auto parsed = parse_gguf(mf.bytes());
  if (!parsed.ok()) return parsed.status().with_context("'" + path + "'");
  auto model = std::shared_ptr<LlamaModel>(new LlamaModel());
  model->mapped_ = std::move(mf);  // the mapping's address does not move with the object
  model->file_ = std::move(parsed).value();
  auto hp = LlamaHParams::from_gguf(model->file_);
  if (!hp.ok()) return hp.status().with_context("'" + path + "'");
  model->hp_ = *hp;
  auto tok = Tokenizer::from_gguf(model->file_);
  if (!tok.ok()) return tok.status().with_context("'" + path + "': tokenizer");
  model->tok_.emplace(std::move(tok).value());
  // The tokenizer holds its own tables: release the parsed copies of its big arrays (vocabulary,
  // merges, scores, types: ~4.7 MiB for a 49k vocabulary) so they do not count twice in RSS.
  // (Swapped with empty vectors: `v.arr_s = {}` would pick the initializer_list assignment,
  // which clears the elements but keeps the capacity.)
  for (auto& [key, v] : model->file_.kv) {
    if (key.rfind("tokenizer.ggml.", 0) == 0 && v.is_array()) {
      release(v.arr_u);
      release(v.arr_i);
      release(v.arr_f);
      release(v.arr_b);
      release(v.arr_s);
      release(v.arr_nested);
    }
  }
  // Everything parse_gguf needed from the header (metadata and tensor table, ~1.7 MiB for a
  // 49k vocabulary) is copied out by now: drop the file pages it touched from this process.
  drop_pages(model->mapped_.bytes(), model->file_.data_offset);
  HC_TRY(model->bind_weights().with_context("'" + path + "'"));
  if (opt.predictor_type)
    HC_TRY(model->convert_predictors(*opt.predictor_type).with_context("'" + path + "'"));
  model->keep_ffn_rows_ = opt.sparse_ffn;
  model->keep_gate_rows_ = opt.sparse_gate;
  model->block_sums_ = opt.block_sums;
  if (opt.repack) {
    model->repack_weights(/*drop_pages=*/true);
    // The matrices are read from their copies now; only the small F32 vectors still were read
    // from the file, and each read faults in its neighbourhood too: 64 KiB of fault-around, or
    // a whole large folio where the page cache holds them (up to 2 MiB per vector). Copy them
    // (~140 KiB for SmolLM2), releasing the file's pages after each one: released only at the
    // end, the folios of SmolLM2 Q8_0's 61 vectors raised the peak RSS by 62 MiB. A matrix left
    // in the file layout faults its pages back in when it is read.
    model->copy_vectors(model->mapped_.bytes());
  }
#if defined(__GLIBC__)
  // Parsing left the freed copies of the vocabulary (49k strings for SmolLM2) as holes in the
  // heap that stay resident; hand their pages back (SmolLM2 Q4_1: 1.3 MiB of peak RSS).
  malloc_trim(0);
#endif
  return std::shared_ptr<const LlamaModel>(std::move(model));
}

void LlamaModel::Unmap::operator()(uint8_t* p) const {
  if (p) munmap(p, bytes);
}

Status LlamaModel::convert_predictors(GgmlType t) {
  if (!quant::can_quantize_to(t) || !quant::is_supported_weight_type(t))
    return Status::Error(std::string("predictor type: cannot store predictors as ") + dtype_name(t));
  for (size_t il = 0; il < w_.layers.size(); ++il) {
    for (TensorView* m : {&w_.layers[il].fc1, &w_.layers[il].fc2}) {
      if (m->empty() || m->type == t) continue;
      if (m->ne0 % dtype_traits(t).block_size != 0)
        return Status::Error("predictor type " + std::string(dtype_name(t)) + ": layer " +
                             std::to_string(il) + "'s predictor rows hold " +
                             std::to_string(m->ne0) + " values, not a multiple of its block size " +
                             std::to_string(dtype_traits(t).block_size));
      const size_t rb = static_cast<size_t>(row_bytes(t, m->ne0)), bytes = rb * m->ne1;
      void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED)
        return Status::Error("predictor type: cannot map " + std::to_string(bytes) + " bytes: " +
                             std::strerror(errno));
      auto* dst = static_cast<uint8_t*>(mem);
      packed_.emplace_back(dst, Unmap{bytes});
      std::vector<float> row(static_cast<size_t>(m->ne0));
      for (int64_t r = 0; r < m->ne1; ++r) {
        quant::dequantize_row(m->type, m->row(r), row.data(), m->ne0);
        quant::quantize_row(t, row.data(), dst + r * rb, m->ne0);
      }
      *m = TensorView::make(t, dst, m->ne0, m->ne1);
    }
  }
  return Status::Ok();
}

void LlamaModel::repack_weights(bool drop_pages) {
  std::vector<TensorView*> mats = {&w_.output};
  for (auto& L : w_.layers) {
    for (TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.fc1, &L.fc2}) mats.push_back(t);
    if (!keep_gate_rows_) mats.push_back(&L.ffn_gate);
    if (!keep_ffn_rows_) {
      mats.push_back(&L.ffn_up);
      mats.push_back(&L.ffn_down);
    }
  }
  // A layer's experts of one kind (all gates, all ups, all downs) share one mapping: one per
  // expert would be 18k mappings for a 48-layer, 128-expert model.
  std::vector<std::vector<TensorView*>> groups;
  for (TensorView* t : mats) groups.push_back({t});
  for (auto& L : w_.layers) {
    if (L.experts.empty()) continue;
    std::vector<TensorView*> gate, up, down;
    for (auto& E : L.experts) {
      gate.push_back(&E.gate);
      up.push_back(&E.up);
      down.push_back(&E.down);
    }
    if (!keep_gate_rows_) groups.push_back(std::move(gate));
    if (!keep_ffn_rows_) {
      groups.push_back(std::move(up));
      groups.push_back(std::move(down));
    }
  }
  for (const std::vector<TensorView*>& g : groups)
    if (!repack_group(g, drop_pages)) return;
}

bool LlamaModel::repack_group(const std::vector<TensorView*>& mats, bool drop_pages) {
  const TensorView& t0 = *mats[0];
  if (t0.empty() || !ops::repack_available(t0.type) || t0.packed || t0.ne1 < ops::kRepackRows)
    return true;
  // Matrices of one group share type and shape (a layer's experts).
  const size_t each = static_cast<size_t>(ops::repack_bytes(t0.type, t0.ne0, t0.ne1));
  const size_t bytes = each * mats.size();
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    HC_LOG_WARN("repacking %s weights: cannot map %zu bytes (%s); keeping the file layout",
                dtype_name(t0.type), bytes, std::strerror(errno));
    return false;
  }
  madvise(mem, bytes, MADV_HUGEPAGE);  // fewer TLB misses while streaming; advisory
  auto* base = static_cast<uint8_t*>(mem);
  packed_.emplace_back(base, Unmap{bytes});
  repacked_bytes_ += bytes;
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < mats.size(); ++i) {
    TensorView* t = mats[i];
    HC_CHECK(t->type == t0.type && t->ne0 == t0.ne0 && t->ne1 == t0.ne1);
    uint8_t* dst = base + i * each;  // repack_bytes is a multiple of 64: every layout aligned
    ops::repack_groups(*t, 0, (t->ne1 + ops::kRepackRows - 1) / ops::kRepackRows, dst);
    const void* orig = t->data;
    t->packed = dst;
    t->block_sums = block_sums_;
    if (w_.token_embd.data == orig) {  // tied embeddings
      w_.token_embd.packed = dst;
      w_.token_embd.block_sums = block_sums_;
    }
    if (drop_pages) {
      // Release the original's whole pages from this process (they stay in the page cache and
      // would be re-read from the file if anything touched them again).
      const auto b = reinterpret_cast<uintptr_t>(orig);
      const uintptr_t e = b + static_cast<uintptr_t>(t->nb1 * t->ne1);
      const uintptr_t pb = (b + page - 1) / page * page, pe = e / page * page;
      if (pe > pb) madvise(reinterpret_cast<void*>(pb), pe - pb, MADV_DONTNEED);
    }
  }
  return true;
}

void LlamaModel::copy_vectors(std::span<const uint8_t> file) {
  std::vector<TensorView*> vecs = {&w_.output_norm, &w_.output_norm_b, &w_.rope_freqs};
  for (auto& L : w_.layers)
    for (TensorView* t : {&L.attn_norm, &L.attn_norm_b, &L.ffn_norm, &L.ffn_norm_b, &L.bq, &L.bk,
                          &L.bv, &L.bo, &L.ffn_gate_b, &L.ffn_down_b, &L.attn_q_norm,
                          &L.attn_k_norm})
      vecs.push_back(t);
  size_t n = 0;
  for (const TensorView* t : vecs) n += t->empty() ? 0 : static_cast<size_t>(t->ne0 * t->ne1);
  vectors_.resize(n);
  size_t at = 0;
  for (TensorView* t : vecs) {
    if (t->empty()) continue;
    const size_t count = static_cast<size_t>(t->ne0 * t->ne1);
    std::memcpy(vectors_.data() + at, t->data, count * sizeof(float));
    *t = TensorView::make(GgmlType::F32, vectors_.data() + at, t->ne0, t->ne1);
    at += count;
    if (!file.empty()) drop_pages(file, file.size());  // page tables only: cheap when mostly empty
  }
}

Result<std::shared_ptr<const LlamaModel>> LlamaModel::from_gguf(GgufFile file, bool repack,
                                                                bool block_sums) {
  auto model = std::shared_ptr<LlamaModel>(new LlamaModel());
  model->file_ = std::move(file);
  HC_ASSIGN_OR_RETURN(model->hp_, LlamaHParams::from_gguf(model->file_));
  auto tok = Tokenizer::from_gguf(model->file_);
  if (!tok.ok()) return tok.status().with_context("tokenizer");
  model->tok_.emplace(std::move(tok).value());
  HC_TRY(model->bind_weights());
  model->block_sums_ = block_sums;
  if (repack) model->repack_weights(/*drop_pages=*/false);
  return std::shared_ptr<const LlamaModel>(std::move(model));
}

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Binds tensor `name` of ggml shape `want` as a matrix of rows of want[0] (norms and biases:
// F32 vectors; matrices: any supported weight type; 3-D tensors, the experts', as their rows).
Status bind_shape(const GgufFile& f, const std::string& name, const std::vector<int64_t>& want,
                  bool matrix, TensorView* out) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) return Status::Error("missing tensor '" + name + "'");
  if (t->ne != want)
    return Status::Error("tensor '" + name + "': expected shape " + shape_str(want) +
                         ", found " + shape_str(t->ne));
  if (matrix && !quant::is_supported_weight_type(t->type))
    return Status::Error("tensor '" + name + "' has type " + dtype_name(t->type) +
                         ", which hotcold cannot compute with (supported: F32, F16, BF16, Q8_0, "
                         "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
  if (!matrix && t->type != GgmlType::F32)
    return Status::Error("tensor '" + name + "': expected type F32, found " + dtype_name(t->type));
  int64_t rows = 1;
  for (size_t i = 1; i < want.size(); ++i) rows *= want[i];
  *out = TensorView::make(t->type, t->data, want[0], rows);
  return Status::Ok();
}

// Binds tensor `name` with ggml shape {ne0[, ne1]}; norms must be F32, matrices any
// supported weight type.
Status bind(const GgufFile& f, const std::string& name, int64_t ne0, int64_t ne1, bool matrix,
            TensorView* out) {
  return bind_shape(f, name, ne1 > 1 || matrix ? std::vector<int64_t>{ne0, ne1}
                                               : std::vector<int64_t>{ne0},
                    matrix, out);
}

// An optional F32 vector: bound when the file has it (shape and type checked), else empty.
Status bind_optional(const GgufFile& f, const std::string& name, int64_t n, TensorView* out) {
  if (!f.find_tensor(name)) return Status::Ok();
  return bind(f, name, n, 1, false, out);
}

// Binds a 3-D tensor of ggml shape {ne0, ne1, ne2} (the experts') as ne1 * ne2 rows of ne0.
Status bind3(const GgufFile& f, const std::string& name, int64_t ne0, int64_t ne1, int64_t ne2,
             TensorView* out) {
  return bind_shape(f, name, {ne0, ne1, ne2}, true, out);
}

}  // namespace

Status LlamaModel::bind_experts(int il) {
  const LlamaHParams& hp = hp_;
  LlamaLayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff, n_expert = hp.n_expert;
  if (!file_.find_tensor(p + "ffn_gate_inp.weight"))
    return Status::Error("missing tensor '" + p + "ffn_gate_inp.weight' (the router of a file with " +
                         std::to_string(n_expert) + " experts per layer)");
  HC_TRY(bind(file_, p + "ffn_gate_inp.weight", n_embd, n_expert, true, &L.ffn_gate_inp));
  TensorView gate, up, down;
  HC_TRY(bind3(file_, p + "ffn_gate_exps.weight", n_embd, n_ff, n_expert, &gate));
  HC_TRY(bind3(file_, p + "ffn_up_exps.weight", n_embd, n_ff, n_expert, &up));
  HC_TRY(bind3(file_, p + "ffn_down_exps.weight", n_ff, n_embd, n_expert, &down));
  for (const char* dense : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"})
    if (file_.find_tensor(p + dense))
      return Status::Error("tensor '" + p + dense + "' in a layer of experts: expected only the "
                           "experts' ffn_*_exps (hotcold runs no shared dense FFN)");
  L.experts.resize(static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    LlamaLayerWeights::Expert& E = L.experts[static_cast<size_t>(e)];
    E.gate = TensorView::make(gate.type, gate.row(e * n_ff), n_embd, n_ff);
    E.up = TensorView::make(up.type, up.row(e * n_ff), n_embd, n_ff);
    E.down = TensorView::make(down.type, down.row(e * n_embd), n_ff, n_embd);
  }
  return Status::Ok();
}

Status LlamaModel::bind_weights() {
  const LlamaHParams& hp = hp_;
  const GgufTensorInfo* emb = file_.find_tensor("token_embd.weight");
  if (!emb) return Status::Error("missing tensor 'token_embd.weight'");
  if (emb->ne.size() != 2) return Status::Error("tensor 'token_embd.weight': expected 2 dimensions");
  hp_.n_vocab = static_cast<int>(emb->ne[1]);
  if (hp_.n_vocab != tok_->n_vocab())
    return Status::Error("token_embd.weight has " + std::to_string(hp_.n_vocab) +
                         " rows but the vocabulary has " + std::to_string(tok_->n_vocab()) +
                         " tokens");
  const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  HC_TRY(bind(file_, "token_embd.weight", hp.n_embd, hp_.n_vocab, true, &w_.token_embd));
  const bool layer_norm = hp.norm == NormKind::kLayer;
  HC_TRY(bind(file_, "output_norm.weight", hp.n_embd, 1, false, &w_.output_norm));
  if (layer_norm) HC_TRY(bind(file_, "output_norm.bias", hp.n_embd, 1, false, &w_.output_norm_b));
  if (file_.find_tensor("output.bias"))
    return Status::Error("tensor 'output.bias': hotcold does not compute an output bias "
                         "(expected no such tensor)");
  if (file_.find_tensor("output.weight")) {
    HC_TRY(bind(file_, "output.weight", hp.n_embd, hp_.n_vocab, true, &w_.output));
  } else {
    w_.output = w_.token_embd;  // tied embeddings
  }
  if (hp.learned_pos)
    HC_TRY(bind(file_, "position_embd.weight", hp.n_embd, hp.n_ctx_train, true, &w_.pos_embd));
  if (file_.find_tensor("rope_freqs.weight"))
    HC_TRY(bind(file_, "rope_freqs.weight", hp.n_rot / 2, 1, false, &w_.rope_freqs));
  w_.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LlamaLayerWeights& L = w_.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    HC_TRY(bind(file_, p + "attn_output.weight", q_dim, hp.n_embd, true, &L.wo));
    if (hp.arch == "falcon") {
      // The FFN reads attn_norm(x); attention reads attn_norm_2(x) where present (Falcon-40B's
      // ln_attn), else the same attn_norm(x).
      HC_TRY(bind(file_, p + "attn_norm.weight", hp.n_embd, 1, false, &L.ffn_norm));
      HC_TRY(bind(file_, p + "attn_norm.bias", hp.n_embd, 1, false, &L.ffn_norm_b));
      if (file_.find_tensor(p + "attn_norm_2.weight")) {
        HC_TRY(bind(file_, p + "attn_norm_2.weight", hp.n_embd, 1, false, &L.attn_norm));
        HC_TRY(bind(file_, p + "attn_norm_2.bias", hp.n_embd, 1, false, &L.attn_norm_b));
      } else {
        L.attn_norm = L.ffn_norm;
        L.attn_norm_b = L.ffn_norm_b;
      }
      // Fused Q/K/V: rows [0, q_dim) are Q, then K, then V (llama.cpp's falcon views).
      TensorView qkv;
      HC_TRY(bind(file_, p + "attn_qkv.weight", hp.n_embd, q_dim + 2 * kv_dim, true, &qkv));
      L.wq = TensorView::make(qkv.type, qkv.row(0), hp.n_embd, q_dim);
      L.wk = TensorView::make(qkv.type, qkv.row(q_dim), hp.n_embd, kv_dim);
      L.wv = TensorView::make(qkv.type, qkv.row(q_dim + kv_dim), hp.n_embd, kv_dim);
      // Ungated FFN: ffn_up decides firing, so it takes ffn_gate's place.
      HC_TRY(bind(file_, p + "ffn_up.weight", hp.n_embd, hp.n_ff, true, &L.ffn_gate));
      for (const char* absent : {"ffn_gate.weight", "ffn_norm.weight"})
        if (file_.find_tensor(p + absent))
          return Status::Error("tensor '" + p + absent + "' in a falcon file (falcon's FFN has no "
                               "gate and reads attn_norm): expected no such tensor");
    } else if (hp.arch == "opt") {
      HC_TRY(bind(file_, p + "attn_norm.weight", hp.n_embd, 1, false, &L.attn_norm));
      HC_TRY(bind(file_, p + "attn_norm.bias", hp.n_embd, 1, false, &L.attn_norm_b));
      HC_TRY(bind(file_, p + "attn_q.weight", hp.n_embd, q_dim, true, &L.wq));
      HC_TRY(bind(file_, p + "attn_k.weight", hp.n_embd, kv_dim, true, &L.wk));
      HC_TRY(bind(file_, p + "attn_v.weight", hp.n_embd, kv_dim, true, &L.wv));
      HC_TRY(bind(file_, p + "attn_q.bias", q_dim, 1, false, &L.bq));
      HC_TRY(bind(file_, p + "attn_k.bias", kv_dim, 1, false, &L.bk));
      HC_TRY(bind(file_, p + "attn_v.bias", kv_dim, 1, false, &L.bv));
      HC_TRY(bind(file_, p + "attn_output.bias", hp.n_embd, 1, false, &L.bo));
      HC_TRY(bind(file_, p + "ffn_norm.weight", hp.n_embd, 1, false, &L.ffn_norm));
      HC_TRY(bind(file_, p + "ffn_norm.bias", hp.n_embd, 1, false, &L.ffn_norm_b));
      // Ungated ReLU FFN with biases: ffn_up decides firing (ffn_gate's place, as falcon's).
      HC_TRY(bind(file_, p + "ffn_up.weight", hp.n_embd, hp.n_ff, true, &L.ffn_gate));
      HC_TRY(bind(file_, p + "ffn_up.bias", hp.n_ff, 1, false, &L.ffn_gate_b));
      const char* down_b = file_.find_tensor(p + "ffn_down_t.bias") ? "ffn_down_t.bias"
                                                                    : "ffn_down.bias";
      HC_TRY(bind(file_, p + down_b, hp.n_embd, 1, false, &L.ffn_down_b));
      if (file_.find_tensor(p + "ffn_gate.weight"))
        return Status::Error("tensor '" + p + "ffn_gate.weight' in an opt file (opt's FFN has no "
                             "gate): expected no such tensor");
    } else {
      HC_TRY(bind(file_, p + "attn_norm.weight", hp.n_embd, 1, false, &L.attn_norm));
      HC_TRY(bind(file_, p + "attn_q.weight", hp.n_embd, q_dim, true, &L.wq));
      HC_TRY(bind(file_, p + "attn_k.weight", hp.n_embd, kv_dim, true, &L.wk));
      HC_TRY(bind(file_, p + "attn_v.weight", hp.n_embd, kv_dim, true, &L.wv));
      // Optional biases (llama.cpp's create_tensor_qkv: qwen2 has them, llama may).
      HC_TRY(bind_optional(file_, p + "attn_q.bias", q_dim, &L.bq));
      HC_TRY(bind_optional(file_, p + "attn_k.bias", kv_dim, &L.bk));
      HC_TRY(bind_optional(file_, p + "attn_v.bias", kv_dim, &L.bv));
      HC_TRY(bind_optional(file_, p + "attn_output.bias", hp.n_embd, &L.bo));
      if (hp.qk_norm) {
        HC_TRY(bind(file_, p + "attn_q_norm.weight", hp.head_dim, 1, false, &L.attn_q_norm));
        HC_TRY(bind(file_, p + "attn_k_norm.weight", hp.head_dim, 1, false, &L.attn_k_norm));
      }
      HC_TRY(bind(file_, p + "ffn_norm.weight", hp.n_embd, 1, false, &L.ffn_norm));
      for (const char* absent : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
        if (file_.find_tensor(p + absent))
          return Status::Error("tensor '" + p + absent + "': hotcold does not compute FFN "
                               "biases in " + hp.arch + " files (expected no such tensor)");
      if (hp.is_moe()) {
        HC_TRY(bind_experts(il));
        continue;
      }
      HC_TRY(bind(file_, p + "ffn_gate.weight", hp.n_embd, hp.n_ff, true, &L.ffn_gate));
      HC_TRY(bind(file_, p + "ffn_up.weight", hp.n_embd, hp.n_ff, true, &L.ffn_up));
    }
    // PowerInfer files carry ffn_down_t instead of ffn_down; either (or both) will do.
    const bool has_down = file_.find_tensor(p + "ffn_down.weight") != nullptr;
    const bool has_down_t = file_.find_tensor(p + "ffn_down_t.weight") != nullptr;
    if (has_down || !has_down_t)
      HC_TRY(bind(file_, p + "ffn_down.weight", hp.n_ff, hp.n_embd, true, &L.ffn_down));
    if (has_down_t)
      HC_TRY(bind(file_, p + "ffn_down_t.weight", hp.n_embd, hp.n_ff, true, &L.ffn_down_t));
    const GgufTensorInfo* fc1 = file_.find_tensor(p + "fc1.weight");
    const GgufTensorInfo* fc2 = file_.find_tensor(p + "fc2.weight");
    if ((fc1 == nullptr) != (fc2 == nullptr))
      return Status::Error("layer " + std::to_string(il) + " has only one of the predictor tensors '" +
                           p + "fc1.weight' and '" + p + "fc2.weight'");
    if (fc1) {
      if (fc1->ne.size() != 2 || fc1->ne[1] < 1)
        return Status::Error("tensor '" + p + "fc1.weight': expected shape [n_embd, rank], found " +
                             shape_str(fc1->ne));
      const int64_t rank = fc1->ne[1];
      HC_TRY(bind(file_, p + "fc1.weight", hp.n_embd, rank, true, &L.fc1));
      HC_TRY(bind(file_, p + "fc2.weight", rank, hp.n_ff, true, &L.fc2));
    }
  }
  return Status::Ok();
}

float LlamaModel::rope_theta_scale() const {
  return std::pow(hp_.rope_freq_base, -2.0f / static_cast<float>(hp_.n_rot));
}

uint64_t LlamaModel::weight_bytes_per_token() const {
  auto bytes = [](const TensorView& t) { return static_cast<uint64_t>(t.nb1 * t.ne1); };
  uint64_t total = static_cast<uint64_t>(w_.token_embd.nb1) + bytes(w_.output);
  for (const auto& L : w_.layers) {
    total += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.ffn_gate) +
             bytes(L.ffn_up) + (L.ffn_down.empty() ? bytes(L.ffn_down_t) : bytes(L.ffn_down));
    if (!L.experts.empty()) {  // the router and the n_expert_used experts a token routes to
      const auto& E = L.experts[0];
      total += bytes(L.ffn_gate_inp) + static_cast<uint64_t>(hp_.n_expert_used) *
                                           (bytes(E.gate) + bytes(E.up) + bytes(E.down));
    }
  }
  return total;
}

}  // namespace hc
