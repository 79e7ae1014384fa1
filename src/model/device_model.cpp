#include "model/device_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace hc {

namespace {

std::string layer_name(int il, const char* what) {
  return "blk." + std::to_string(il) + "." + what;
}

}  // namespace

TensorView bias_rows(const LlamaLayerWeights& L) {
  return TensorView::make(GgmlType::F32, L.ffn_gate_b.data, 1, L.ffn_gate_b.ne0);
}

namespace {

// Whether a layer's experts are rows of one matrix per kind, in order (the file's 3-D
// tensors, as LlamaModel binds them), each kind of one type and shape.
bool stacked(const std::vector<LlamaLayerWeights::Expert>& ex) {
  if (ex.empty()) return false;
  const auto follows = [](const TensorView& a, const TensorView& b) {
    return a.type == b.type && a.ne0 == b.ne0 && a.ne1 == b.ne1 && a.nb1 == b.nb1 &&
           b.data == a.row(a.ne1) && !a.packed == !b.packed;
  };
  for (size_t e = 1; e < ex.size(); ++e)
    if (!follows(ex[e - 1].gate, ex[e].gate) || !follows(ex[e - 1].up, ex[e].up) ||
        !follows(ex[e - 1].down, ex[e].down))
      return false;
  return true;
}

}  // namespace

DeviceModel::~DeviceModel() {
  (void)dev_->sync();  // queued operations (a migration's row copies) may still use the weights
  for (const TensorView& w : owned_) dev_->free_weight(w);
  if (rope_freqs_) dev_->free(rope_freqs_);
}

Result<TensorView> DeviceModel::put(const TensorView& host, const char* what,
                                    const int32_t* rows, int64_t n_rows) {
  const int64_t n = n_rows < 0 ? host.ne1 : n_rows;
  const uint64_t before = dev_->charged_bytes();
  auto w = dev_->upload_weight(host, rows, 0, n, what);
  if (!w.ok()) return w.status();
  owned_.push_back(*w);
  weight_bytes_ += dev_->charged_bytes() - before;  // with any layout the device adds
  return w;
}

Status DeviceModel::place_layer(int il, bool attn, bool dense_ffn,
                                const std::vector<int32_t>* hot) {
  const LlamaHParams& hp = model_->hparams();
  const LlamaLayerWeights& L = model_->weights().layers[static_cast<size_t>(il)];
  DeviceLayer& d = layers_[static_cast<size_t>(il)];
  if (attn) HC_TRY(place_attention(il));
  if (dense_ffn) {
    if (L.ffn_down.empty())
      return Status::Error("offloading layer " + std::to_string(il) +
                           ": the dense FFN needs blk.N.ffn_down.weight, which this file lacks "
                           "(PowerInfer layout): run it with the sparse FFN instead");
    d.ffn_dense = true;
    const std::string n_norm = layer_name(il, "ffn_norm"), n_g = layer_name(il, "ffn_gate"),
                      n_u = layer_name(il, "ffn_up"), n_d = layer_name(il, "ffn_down");
    if (d.ffn_norm.empty()) {  // not already placed with the attention
      HC_ASSIGN_OR_RETURN(d.ffn_norm, put(L.ffn_norm, n_norm.c_str()));
    }
    HC_ASSIGN_OR_RETURN(d.gate, put(L.ffn_gate, n_g.c_str()));
    HC_ASSIGN_OR_RETURN(d.up, put(L.ffn_up, n_u.c_str()));
    HC_ASSIGN_OR_RETURN(d.down, put(L.ffn_down, n_d.c_str()));
  }
  d.local.assign(static_cast<size_t>(hp.n_ff), -1);
  if (hot && !hot->empty() && !dense_ffn) {
    if (!sparse_)
      return Status::Error("layer " + std::to_string(il) +
                           ": hot neurons on the device need the sparse FFN");
    if (!hp.ffn_gated && hp.ffn_act != FfnActivation::kRelu)
      return Status::Error(std::string("hot neurons on a device: the devices compute an ungated "
                                       "FFN with ReLU only, this ") + hp.arch + " model's is " +
                           activation_name(hp.ffn_act) + ": run it on the host (no -ngl / "
                           "--vram-budget)");
    for (size_t j = 0; j < hot->size(); ++j) {
      const int32_t i = (*hot)[j];
      if (i < 0 || i >= hp.n_ff || (j > 0 && i <= (*hot)[j - 1]))
        return Status::Error("layer " + std::to_string(il) + ": hot neuron list must be "
                             "ascending, unique and in [0, " + std::to_string(hp.n_ff) +
                             "); entry " + std::to_string(j) + " is " + std::to_string(i));
      d.local[static_cast<size_t>(i)] = static_cast<int32_t>(j);
    }
    d.hot = *hot;
    const int64_t n = static_cast<int64_t>(d.hot.size());
    const std::string n_g = layer_name(il, "ffn_gate (hot rows)"),
                      n_u = layer_name(il, "ffn_up (hot rows)"),
                      n_d = layer_name(il, "ffn_down_t (hot rows)");
    HC_ASSIGN_OR_RETURN(d.hot_gate, put(L.ffn_gate, n_g.c_str(), d.hot.data(), n));
    if (!L.ffn_up.empty()) {  // ungated FFNs (falcon) have none
      HC_ASSIGN_OR_RETURN(d.hot_up, put(L.ffn_up, n_u.c_str(), d.hot.data(), n));
    }
    if (!L.ffn_gate_b.empty()) {  // opt: the gate's bias per hot neuron (ffn_down's stays host)
      const std::string n_b = layer_name(il, "ffn_up.bias (hot rows)");
      HC_ASSIGN_OR_RETURN(d.hot_gate_b, put(bias_rows(L), n_b.c_str(), d.hot.data(), n));
    }
    HC_ASSIGN_OR_RETURN(d.hot_down_t, put(sparse_->down_t(il), n_d.c_str(), d.hot.data(), n));
  }
  for (int32_t i = 0; i < hp.n_ff; ++i)
    if (d.local[static_cast<size_t>(i)] < 0) d.cold.push_back(i);
  if (attn && !dense_ffn && sparse_ && sparse_->use_predictor() && !L.fc1.empty()) {
    const std::string n1 = layer_name(il, "fc1"), n2 = layer_name(il, "fc2"),
                      ni = layer_name(il, "hot neuron ids");
    HC_ASSIGN_OR_RETURN(d.pred_fc1, put(L.fc1, n1.c_str()));
    HC_ASSIGN_OR_RETURN(d.pred_fc2, put(L.fc2, n2.c_str()));
    if (!d.hot.empty()) {
      const TensorView ids = TensorView::make(GgmlType::I32, d.hot.data(), 1,
                                              static_cast<int64_t>(d.hot.size()));
      HC_ASSIGN_OR_RETURN(d.hot_ids, put(ids, ni.c_str()));
    }
  }
  return Status::Ok();
}

Status DeviceModel::place_attention(int il) {
  const LlamaLayerWeights& L = model_->weights().layers[static_cast<size_t>(il)];
  DeviceLayer& d = layers_[static_cast<size_t>(il)];
  d.attn = true;
  struct Part {
    const TensorView* host;
    TensorView* dev;
    const char* name;
  };
  const Part parts[] = {{&L.attn_norm, &d.attn_norm, "attn_norm"}, {&L.wq, &d.wq, "attn_q"},
                        {&L.wk, &d.wk, "attn_k"},                   {&L.wv, &d.wv, "attn_v"},
                        {&L.wo, &d.wo, "attn_output"},              {&L.bq, &d.bq, "attn_q.bias"},
                        {&L.bk, &d.bk, "attn_k.bias"},              {&L.bv, &d.bv, "attn_v.bias"},
                        {&L.bo, &d.bo, "attn_output.bias"},
                        {&L.attn_q_norm, &d.attn_q_norm, "attn_q_norm"},
                        {&L.attn_k_norm, &d.attn_k_norm, "attn_k_norm"},
                        // The FFN's input norm too, so that a hybrid FFN after this attention
                        // norms its input where the residual stream is (hybrid_ffn), and a
                        // layer of experts' router, so that it can route there.
                        {&L.ffn_norm, &d.ffn_norm, "ffn_norm"},
                        {&L.ffn_gate_inp, &d.router, "ffn_gate_inp"}};
  for (const Part& part : parts) {
    if (part.host->empty()) continue;  // optional biases and norms
    const std::string name = layer_name(il, part.name);
    HC_ASSIGN_OR_RETURN(*part.dev, put(*part.host, name.c_str()));
  }
  return Status::Ok();
}

Status DeviceModel::place_experts(int il, const std::vector<int32_t>& experts) {
  const LlamaHParams& hp = model_->hparams();
  const LlamaLayerWeights& L = model_->weights().layers[static_cast<size_t>(il)];
  DeviceLayer& d = layers_[static_cast<size_t>(il)];
  d.slot_of.assign(static_cast<size_t>(hp.n_expert), -1);
  for (size_t j = 0; j < experts.size(); ++j) {
    const int32_t e = experts[j];
    if (e < 0 || e >= hp.n_expert || (j > 0 && e <= experts[j - 1]))
      return Status::Error("layer " + std::to_string(il) + ": the device's expert list must be "
                           "ascending, unique and in [0, " + std::to_string(hp.n_expert) +
                           "); entry " + std::to_string(j) + " is " + std::to_string(e));
    d.slot_of[static_cast<size_t>(e)] = static_cast<int32_t>(j);
  }
  d.expert_of = experts;
  d.exp.resize(experts.size());
  if (experts.size() == static_cast<size_t>(hp.n_expert) && stacked(L.experts)) {
    // All of them: one matrix per kind (slot = expert), each expert a view of its rows.
    const LlamaLayerWeights::Expert& E0 = L.experts[0];
    const auto stack = [&](const TensorView& t0) {
      TensorView s = t0;
      s.ne1 = t0.ne1 * hp.n_expert;
      return s;
    };
    const std::string ng = layer_name(il, "ffn_gate_exps"), nu = layer_name(il, "ffn_up_exps"),
                      nd = layer_name(il, "ffn_down_exps");
    HC_ASSIGN_OR_RETURN(d.gate_exps, put(stack(E0.gate), ng.c_str()));
    HC_ASSIGN_OR_RETURN(d.up_exps, put(stack(E0.up), nu.c_str()));
    HC_ASSIGN_OR_RETURN(d.down_exps, put(stack(E0.down), nd.c_str()));
    for (size_t j = 0; j < experts.size(); ++j) {
      const int64_t e = static_cast<int64_t>(j);
      d.exp[j].gate = dev_->weight_rows(d.gate_exps, e * E0.gate.ne1, E0.gate.ne1);
      d.exp[j].up = dev_->weight_rows(d.up_exps, e * E0.up.ne1, E0.up.ne1);
      d.exp[j].down = dev_->weight_rows(d.down_exps, e * E0.down.ne1, E0.down.ne1);
    }
    return Status::Ok();
  }
  for (size_t j = 0; j < experts.size(); ++j) {
    const LlamaLayerWeights::Expert& E = L.experts[static_cast<size_t>(experts[j])];
    const std::string tag = "expert " + std::to_string(experts[j]) + ")";
    const std::string ng = layer_name(il, ("ffn_gate_exps (" + tag).c_str()),
                      nu = layer_name(il, ("ffn_up_exps (" + tag).c_str()),
                      nd = layer_name(il, ("ffn_down_exps (" + tag).c_str());
    HC_ASSIGN_OR_RETURN(d.exp[j].gate, put(E.gate, ng.c_str()));
    HC_ASSIGN_OR_RETURN(d.exp[j].up, put(E.up, nu.c_str()));
    HC_ASSIGN_OR_RETURN(d.exp[j].down, put(E.down, nd.c_str()));
  }
  return Status::Ok();
}

Result<std::unique_ptr<DeviceModel>> DeviceModel::build(const LlamaModel& model,
                                                        const SparseFfn* sparse,
                                                        std::shared_ptr<ops::Device> dev,
                                                        const DevicePlacement& p) {
  if (!dev) return Status::Error("DeviceModel::build: no device");
  const LlamaHParams& hp = model.hparams();
  if (p.n_gpu_layers < 0)
    return Status::Error("--n-gpu-layers must be >= 0, got " + std::to_string(p.n_gpu_layers));
  if (!p.attn.empty() && static_cast<int>(p.attn.size()) != hp.n_layer)
    return Status::Error("placement: expected attention flags for " +
                         std::to_string(hp.n_layer) + " layers, found " +
                         std::to_string(p.attn.size()));
  if (!p.hot.empty() && static_cast<int>(p.hot.size()) != hp.n_layer)
    return Status::Error("placement: expected hot-neuron lists for " +
                         std::to_string(hp.n_layer) + " layers, found " +
                         std::to_string(p.hot.size()));
  if (!p.experts.empty() && static_cast<int>(p.experts.size()) != hp.n_layer)
    return Status::Error("placement: expected expert lists for " + std::to_string(hp.n_layer) +
                         " layers, found " + std::to_string(p.experts.size()));
  if (hp.is_moe() && (sparse || !p.hot.empty()))
    return Status::Error("placement: a mixture-of-experts model places whole experts, not FFN "
                         "neurons (no sparse FFN or hot-neuron plan)");
  if (!hp.is_moe() && (!p.experts.empty() || p.n_cpu_moe != 0))
    return Status::Error("placement: experts (--n-cpu-moe, an expert plan) need a "
                         "mixture-of-experts model; " + hp.arch + " has a dense FFN");
  if (p.n_cpu_moe < 0)
    return Status::Error("--n-cpu-moe must be >= 0, got " + std::to_string(p.n_cpu_moe));
  const bool any_attn_asked = p.n_gpu_layers > 0 ||
                              std::any_of(p.attn.begin(), p.attn.end(), [](uint8_t a) { return a != 0; });
  if (any_attn_asked && !device_blocks_supported(hp))
    return Status::Error(
        "placement: the devices do not run " + hp.arch + "'s attention, dense FFN or output "
        "layer (its LayerNorm, parallel blocks or learned positions): -ngl "
        "and attention placements are not built for it; place hot neurons only (--vram-budget "
        "with --stats, or a plan without attention)");
  std::unique_ptr<DeviceModel> dm(new DeviceModel());
  dm->dev_ = dev;
  dm->model_ = &model;
  dm->sparse_ = sparse;
  dm->layers_.resize(static_cast<size_t>(hp.n_layer));
  const int first_full = std::max(0, hp.n_layer - p.n_gpu_layers);
  dm->neuron_ids_.resize(static_cast<size_t>(hp.n_ff));
  for (int32_t i = 0; i < hp.n_ff; ++i) dm->neuron_ids_[static_cast<size_t>(i)] = i;
  std::vector<int32_t> all(static_cast<size_t>(hp.n_ff));
  for (int32_t i = 0; i < hp.n_ff; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<int32_t> all_experts(static_cast<size_t>(hp.n_expert));
  for (int32_t e = 0; e < hp.n_expert; ++e) all_experts[static_cast<size_t>(e)] = e;
  for (int il = 0; il < hp.n_layer; ++il) {
    const bool full = il >= first_full;
    const bool attn = full || (!p.attn.empty() && p.attn[static_cast<size_t>(il)]);
    if (hp.is_moe()) {
      HC_TRY(dm->place_layer(il, attn, false, nullptr));
      const std::vector<int32_t>* ex = full ? (il < p.n_cpu_moe ? nullptr : &all_experts)
                                       : p.experts.empty() ? nullptr
                                                           : &p.experts[static_cast<size_t>(il)];
      if (ex && !ex->empty()) HC_TRY(dm->place_experts(il, *ex));
      continue;
    }
    const std::vector<int32_t>* hot = full && sparse ? &all
                                      : p.hot.empty() ? nullptr : &p.hot[static_cast<size_t>(il)];
    HC_TRY(dm->place_layer(il, attn, full && !sparse, hot));
  }
  const LlamaWeights& W = model.weights();
  if (p.n_gpu_layers > hp.n_layer) {
    HC_ASSIGN_OR_RETURN(dm->output_norm_, dm->put(W.output_norm, "output_norm"));
    HC_ASSIGN_OR_RETURN(dm->output_, dm->put(W.output, "output"));
  }
  const bool any_attn = dm->n_attn_layers() > 0 || dm->output_on_device();
  if (any_attn && !W.rope_freqs.empty()) {
    const uint64_t bytes = static_cast<uint64_t>(W.rope_freqs.ne0) * sizeof(float);
    HC_ASSIGN_OR_RETURN(void* mem, dev->alloc(bytes, "rope_freqs"));
    dm->rope_freqs_ = static_cast<float*>(mem);
    dm->weight_bytes_ += bytes;
    HC_TRY(dev->upload(mem, W.rope_freqs.data, bytes));
  }
  dm->whole_ = dm->output_on_device();
  for (const DeviceLayer& d : dm->layers_)
    dm->whole_ = dm->whole_ && d.attn && d.ffn_dense && !d.moe();
  return dm;
}

int DeviceModel::n_attn_layers() const {
  int n = 0;
  for (const DeviceLayer& d : layers_) n += d.attn;
  return n;
}

int64_t DeviceModel::n_hot_neurons() const {
  int64_t n = 0;
  for (const DeviceLayer& d : layers_) n += d.ffn_dense ? static_cast<int64_t>(d.local.size())
                                                        : static_cast<int64_t>(d.hot.size());
  return n;
}

int64_t DeviceModel::n_experts() const {
  int64_t n = 0;
  for (const DeviceLayer& d : layers_) n += static_cast<int64_t>(d.expert_of.size());
  return n;
}

std::string DeviceModel::summary() const {
  int dense = 0;
  for (const DeviceLayer& d : layers_) dense += d.ffn_dense;
  const LlamaHParams& hp = model_->hparams();
  char ffn[96];
  if (hp.is_moe())
    std::snprintf(ffn, sizeof ffn, "%lld of %lld experts", static_cast<long long>(n_experts()),
                  static_cast<long long>(hp.n_expert) * hp.n_layer);
  else
    std::snprintf(ffn, sizeof ffn, "%d dense FFNs, %lld FFN neurons", dense,
                  static_cast<long long>(n_hot_neurons()));
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s: %d/%zu layers' attention, %s%s, %.1f MiB of weights",
                dev_->name().c_str(), n_attn_layers(), layers_.size(), ffn,
                output_on_device() ? ", output" : "",
                static_cast<double>(weight_bytes_) / (1024.0 * 1024.0));
  return buf;
}

Status DeviceModel::migrate(int il, const std::vector<sparse::Swap>& swaps) {
  if (il < 0 || il >= static_cast<int>(layers_.size()))
    return Status::Error("migrate: layer " + std::to_string(il) + " out of range");
  DeviceLayer& d = layers_[static_cast<size_t>(il)];
  if (!d.hybrid())
    return Status::Error("migrate: layer " + std::to_string(il) +
                         " holds no hot neurons (or its whole FFN) on the device");
  if (swaps.empty()) return Status::Ok();
  const int64_t n_ff = static_cast<int64_t>(d.local.size());
  // Checked on a copy of local, the map as it will be, before anything changes.
  local_next_.assign(d.local.begin(), d.local.end());
  HC_TRY(sparse::apply_swaps_to_map(local_next_, static_cast<int64_t>(d.hot.size()), swaps)
             .with_context("migrate: layer " + std::to_string(il)));
  mig_src_.clear();
  mig_slot_.clear();
  for (const sparse::Swap& w : swaps) {
    mig_src_.push_back(w.admit);
    mig_slot_.push_back(w.slot);
    d.hot[static_cast<size_t>(w.slot)] = w.admit;
  }
  const LlamaLayerWeights& L = model_->weights().layers[static_cast<size_t>(il)];
  const int64_t n = static_cast<int64_t>(swaps.size());
  dev_->update_rows(d.hot_gate, L.ffn_gate, mig_src_.data(), mig_slot_.data(), n);
  if (!L.ffn_up.empty()) dev_->update_rows(d.hot_up, L.ffn_up, mig_src_.data(), mig_slot_.data(), n);
  if (!L.ffn_gate_b.empty())
    dev_->update_rows(d.hot_gate_b, bias_rows(L), mig_src_.data(), mig_slot_.data(), n);
  dev_->update_rows(d.hot_down_t, sparse_->down_t(il), mig_src_.data(), mig_slot_.data(), n);
  if (!d.hot_ids.empty()) {  // slot s now holds neuron admit: its id from the constant list
    const TensorView ids = TensorView::make(GgmlType::I32, neuron_ids_.data(), 1, n_ff);
    dev_->update_rows(d.hot_ids, ids, mig_src_.data(), mig_slot_.data(), n);
  }
  // The host's candidate list, rebuilt aside and swapped in (the double buffer).
  cold_next_.clear();
  for (int64_t i = 0; i < n_ff; ++i)
    if (local_next_[static_cast<size_t>(i)] < 0) cold_next_.push_back(static_cast<int32_t>(i));
  d.local.swap(local_next_);
  d.cold.swap(cold_next_);
  migrated_neurons_ += static_cast<uint64_t>(n);
  migrated_bytes_ += static_cast<uint64_t>(n) *
                     static_cast<uint64_t>(row_bytes(L.ffn_gate.type, L.ffn_gate.ne0) +
                                           (L.ffn_up.empty() ? 0 : row_bytes(L.ffn_up.type, L.ffn_up.ne0)) +
                                           (L.ffn_gate_b.empty() ? 0 : sizeof(float)) +
                                           row_bytes(sparse_->down_t(il).type,
                                                     sparse_->down_t(il).ne0));
  return Status::Ok();
}

Status DeviceModel::migrate_experts(int il, const std::vector<sparse::Swap>& swaps) {
  if (il < 0 || il >= static_cast<int>(layers_.size()))
    return Status::Error("migrate_experts: layer " + std::to_string(il) + " out of range");
  DeviceLayer& d = layers_[static_cast<size_t>(il)];
  if (!d.moe())
    return Status::Error("migrate_experts: layer " + std::to_string(il) +
                         " holds no experts on the device");
  if (swaps.empty()) return Status::Ok();
  local_next_.assign(d.slot_of.begin(), d.slot_of.end());
  HC_TRY(sparse::apply_swaps_to_map(local_next_, static_cast<int64_t>(d.expert_of.size()), swaps)
             .with_context("migrate_experts: layer " + std::to_string(il)));
  const LlamaHParams& hp = model_->hparams();
  const LlamaLayerWeights& L = model_->weights().layers[static_cast<size_t>(il)];
  const int64_t rows = std::max<int64_t>(hp.n_ff, hp.n_embd);
  if (static_cast<int64_t>(iota_.size()) < rows) {
    iota_.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) iota_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  for (const sparse::Swap& w : swaps) {  // each admitted expert's rows into its slot, whole
    const LlamaLayerWeights::Expert& src = L.experts[static_cast<size_t>(w.admit)];
    LlamaLayerWeights::Expert& dst = d.exp[static_cast<size_t>(w.slot)];
    dev_->update_rows(dst.gate, src.gate, iota_.data(), iota_.data(), src.gate.ne1);
    dev_->update_rows(dst.up, src.up, iota_.data(), iota_.data(), src.up.ne1);
    dev_->update_rows(dst.down, src.down, iota_.data(), iota_.data(), src.down.ne1);
    d.expert_of[static_cast<size_t>(w.slot)] = w.admit;
    migrated_bytes_ += rows_bytes(src.gate, src.gate.ne1) + rows_bytes(src.up, src.up.ne1) +
                       rows_bytes(src.down, src.down.ne1);
  }
  d.slot_of.swap(local_next_);
  migrated_experts_ += swaps.size();
  return Status::Ok();
}

// ---- DeviceSession ----------------------------------------------------------------------------

namespace {
Status check_kv_shape(const DeviceSession& ds, const KvCache& cache, int64_t n) {
  const LlamaHParams& hp = ds.dm().model().hparams();
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  if (cache.n_layer != hp.n_layer || cache.n_ctx != ds.n_ctx() || cache.kv_dim != kv_dim ||
      n < 0 || n > ds.n_ctx())
    return Status::Error("device KV copy: a host cache of " + std::to_string(cache.n_layer) +
                         " layers x " + std::to_string(cache.n_ctx) + " positions x " +
                         std::to_string(cache.kv_dim) + " and " + std::to_string(n) +
                         " positions, expected " + std::to_string(hp.n_layer) + " x " +
                         std::to_string(ds.n_ctx()) + " x " + std::to_string(kv_dim));
  return Status::Ok();
}
}  // namespace

// K rows [0, n) are one contiguous copy per layer; V is stored transposed ([kv_dim, n_ctx]),
// so its positions [0, n) are strided: the whole layer goes in one copy instead of kv_dim.
Status DeviceSession::kv_to_host(KvCache& cache, int64_t n) const {
  HC_TRY(check_kv_shape(*this, cache, n));
  ops::Device& dev = dm_->device();
  const uint64_t v_bytes = static_cast<uint64_t>(cache.kv_dim) * n_ctx_ * sizeof(fp16_t);
  for (int il = 0; il < cache.n_layer && n > 0; ++il) {
    if (!k_[static_cast<size_t>(il)]) continue;
    HC_TRY(dev.download(cache.k_at(il, 0), k_[static_cast<size_t>(il)],
                        static_cast<uint64_t>(n) * cache.kv_dim * sizeof(fp16_t)));
    HC_TRY(dev.download(cache.v_row(il, 0), v_[static_cast<size_t>(il)], v_bytes));
  }
  return Status::Ok();
}

Status DeviceSession::kv_from_host(const KvCache& cache, int64_t n) const {
  HC_TRY(check_kv_shape(*this, cache, n));
  ops::Device& dev = dm_->device();
  const uint64_t v_bytes = static_cast<uint64_t>(cache.kv_dim) * n_ctx_ * sizeof(fp16_t);
  for (int il = 0; il < cache.n_layer && n > 0; ++il) {
    if (!k_[static_cast<size_t>(il)]) continue;
    HC_TRY(dev.upload(k_[static_cast<size_t>(il)], cache.k_at(il, 0),
                      static_cast<uint64_t>(n) * cache.kv_dim * sizeof(fp16_t)));
    HC_TRY(dev.upload(v_[static_cast<size_t>(il)], cache.v_row(il, 0), v_bytes));
  }
  return Status::Ok();
}

DeviceSession::~DeviceSession() {
  ops::Device& dev = dm_->device();
  (void)dev.sync();  // nothing queued may still use these buffers
  segments.reset();  // its recordings, before the buffers they name
  for (int g : step_graph)
    if (g >= 0) dev.drop_record(g);
  for (void* p : dev_blocks_) dev.free(p);
  for (void* p : host_blocks_) dev.free_host(p);
}

Result<void*> DeviceSession::dev_alloc(uint64_t bytes, const char* what) {
  auto p = dm_->device().alloc(bytes, what);
  if (p.ok()) dev_blocks_.push_back(*p);
  return p;
}

Result<void*> DeviceSession::host_alloc(uint64_t bytes) {
  auto p = dm_->device().alloc_host(bytes);
  if (p.ok()) host_blocks_.push_back(*p);
  return p;
}

namespace {

// What a session needs on the device besides the KV cache.
struct Needs {
  bool attn = false, dense = false, hot = false, output = false;
  bool moe = false;       // experts on the device
  int64_t pred_rank = 0;  // the largest predictor rank on the device (0: no predictor there)
};

// The largest predictor rank of the model's layers (0: no predictors).
int64_t max_pred_rank(const LlamaModel& model) {
  int64_t r = 0;
  for (const LlamaLayerWeights& L : model.weights().layers)
    if (!L.fc1.empty()) r = std::max(r, L.fc1.ne1);
  return r;
}

// Every device buffer of a session, in one list that both allocation (create) and the
// planners' estimate (scratch_bytes) read: fn(member, bytes, what) per buffer, member being the
// DeviceSession pointer the allocation goes to.
template <class Fn>
void for_each_buffer(const LlamaHParams& hp, uint64_t T, const Needs& n, Fn fn) {
  const uint64_t f = sizeof(float), kv_dim = static_cast<uint64_t>(hp.n_head_kv) * hp.head_dim;
  const uint64_t embd = T * hp.n_embd * f, qd = T * hp.n_head * hp.head_dim * f,
                 kvd = T * kv_dim * f, ff = T * hp.n_ff * f;
  fn(&DeviceSession::x, embd, "activations (x)");
  fn(&DeviceSession::xb, embd, "activations (xb)");
  fn(&DeviceSession::proj, embd, "activations (proj)");
  if (n.attn) {
    fn(&DeviceSession::q, qd, "activations (q)");
    fn(&DeviceSession::k, kvd, "activations (k)");
    fn(&DeviceSession::v, kvd, "activations (v)");
    fn(&DeviceSession::att, qd, "activations (attention)");
  }
  if (n.dense) {
    fn(&DeviceSession::gate, ff, "activations (gate)");
    fn(&DeviceSession::up, ff, "activations (up)");
  }
  if (n.hot) {
    fn(&DeviceSession::cold, embd, "activations (the host's cold half)");
    fn(&DeviceSession::idx, T * hp.n_ff * sizeof(int32_t), "hot index");
    fn(&DeviceSession::fire, T * hp.n_ff, "hot firing mask");
  }
  if (n.pred_rank > 0) {
    fn(&DeviceSession::pred_hid, T * static_cast<uint64_t>(n.pred_rank) * f,
       "predictor (hidden)");
    fn(&DeviceSession::pred_logit, ff, "predictor (logits)");
    fn(&DeviceSession::pred_fire, std::max<uint64_t>(T, hp.n_layer) * hp.n_ff,
       "predictor (mask)");
    fn(&DeviceSession::slots, static_cast<uint64_t>(hp.n_ff) * sizeof(int32_t), "hot slots");
  }
  if (n.moe) {
    const uint64_t routes = T * static_cast<uint64_t>(hp.n_expert_used);
    if (!n.dense) {
      fn(&DeviceSession::gate, ff, "activations (expert gate)");
      fn(&DeviceSession::up, ff, "activations (expert up)");
    }
    fn(&DeviceSession::xe, embd, "activations (expert inputs)");
    fn(&DeviceSession::routes_out, routes * hp.n_embd * f, "activations (expert outputs)");
    fn(&DeviceSession::route_tok, routes * sizeof(int32_t), "expert routes (tokens)");
    fn(&DeviceSession::route_row, routes * sizeof(int32_t), "expert routes (rows)");
    fn(&DeviceSession::route_w, routes * f, "expert routes (weights)");
    fn(&DeviceSession::moe_logits, T * static_cast<uint64_t>(hp.n_expert) * f, "router logits");
  }
  if (n.output) {
    fn(&DeviceSession::logits, T * hp.n_vocab * f, "logits");
    fn(&DeviceSession::ids, T * sizeof(int32_t), "greedy token ids");
  }
  if (n.attn) fn(&DeviceSession::pos, sizeof(int32_t), "decode step position");
}

bool any(const Needs& n) {
  return n.attn || n.dense || n.hot || n.output || n.moe || n.pred_rank > 0;
}

ops::WeightShape shape_of(const TensorView& w) { return {w.type, w.ne0, w.ne1}; }

// The operations a session queues (ops::ScratchNeeds) when the model's layers are placed as
// `place` says: per layer, attention, a dense FFN, and hot neurons (their count, 0 = none).
template <class Place>
ops::ScratchNeeds op_needs(const LlamaModel& model, int64_t T, bool output, Place place) {
  const LlamaHParams& hp = model.hparams();
  ops::ScratchNeeds s;
  s.max_tokens = T;
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
    bool attn = false, dense = false, pred = false;
    int64_t hot = 0;
    place(il, &attn, &dense, &hot, &pred);
    if (attn)
      for (const TensorView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate_inp})
        if (!w->empty()) s.matmul.push_back(shape_of(*w));
    if (pred)
      for (const TensorView* w : {&L.fc1, &L.fc2}) s.matmul.push_back(shape_of(*w));
    if (dense)
      for (const TensorView* w : {&L.ffn_gate, &L.ffn_up, &L.ffn_down})
        if (!w->empty()) s.matmul.push_back(shape_of(*w));
    if (hot > 0 && !L.experts.empty()) {  // experts: every one has the first one's shapes
      const LlamaLayerWeights::Expert& E = L.experts[0];
      for (const TensorView* w : {&E.gate, &E.up, &E.down}) s.matmul.push_back(shape_of(*w));
    } else if (hot > 0) {
      s.ffn.push_back({L.ffn_gate.type, L.ffn_gate.ne0, hot});
      if (!L.ffn_up.empty()) s.ffn.push_back({L.ffn_up.type, L.ffn_up.ne0, hot});
    }
  }
  if (output) s.matmul.push_back(shape_of(model.weights().output));
  return s;
}

Needs needs_of(const DeviceModel& dm) {
  Needs n;
  for (int il = 0; il < dm.model().hparams().n_layer; ++il) {
    n.attn |= dm.layer(il).attn;
    n.dense |= dm.layer(il).ffn_dense;
    n.hot |= dm.layer(il).hybrid();
    n.moe |= dm.layer(il).moe();
    if (dm.layer(il).predicts()) n.pred_rank = std::max(n.pred_rank, dm.layer(il).pred_fc1.ne1);
  }
  n.output = dm.output_on_device();
  return n;
}

ops::ScratchNeeds op_needs_of(const DeviceModel& dm, int64_t max_tokens) {
  return op_needs(dm.model(), max_tokens, dm.output_on_device(),
                  [&](int il, bool* a, bool* d, int64_t* h, bool* p) {
                    const DeviceLayer& l = dm.layer(il);
                    *a = l.attn, *d = l.ffn_dense, *p = l.predicts();
                    *h = l.moe()      ? static_cast<int64_t>(l.expert_of.size())
                         : l.hybrid() ? static_cast<int64_t>(l.hot.size())
                                      : 0;
                  });
}

// What the session's buffers charge on dev (for_each_buffer) plus the device's own scratch for
// operations `ops`; 0 when nothing is on the device.
uint64_t session_bytes(const ops::Device& dev, const LlamaHParams& hp, int64_t T, const Needs& n,
                       const ops::ScratchNeeds& ops) {
  if (!any(n)) return 0;
  uint64_t total = 0;
  for_each_buffer(hp, static_cast<uint64_t>(T), n,
                  [&](auto, uint64_t bytes, const char*) { total += dev.charge_bytes(bytes); });
  return total + dev.scratch_bytes(ops);
}

uint64_t kv_half_bytes(const LlamaHParams& hp, int n_ctx) {  // K or V of one layer
  return static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(hp.n_head_kv) * hp.head_dim *
         sizeof(fp16_t);
}

}  // namespace

uint64_t DeviceSession::scratch_bytes(const ops::Device& dev, const LlamaModel& model,
                                     int64_t max_tokens, bool attn, bool dense, bool hot,
                                     bool output) {
  const int64_t n_ff = model.hparams().n_ff;
  // A predictor follows the attention into a layer that is not dense there (an upper bound:
  // only in predictor mode).
  const int64_t rank = attn && hot ? max_pred_rank(model) : 0;
  Needs n{attn, dense, hot, output};
  n.pred_rank = rank;
  return session_bytes(dev, model.hparams(), max_tokens, n,
                       op_needs(model, max_tokens, output,
                                [&](int il, bool* a, bool* d, int64_t* h, bool* p) {
                                  *a = attn, *d = dense, *h = hot ? n_ff : 0;
                                  *p = rank > 0 &&
                                       !model.weights().layers[static_cast<size_t>(il)].fc1.empty();
                                }));
}

uint64_t DeviceSession::moe_scratch_bytes(const ops::Device& dev, const LlamaModel& model,
                                         int64_t max_tokens, bool attn, bool output) {
  Needs n{attn, false, false, output, true};
  return session_bytes(dev, model.hparams(), max_tokens, n,
                       op_needs(model, max_tokens, output,
                                [&](int, bool* a, bool* d, int64_t* h, bool* p) {
                                  *a = attn, *d = false, *h = 1, *p = false;
                                }));
}

uint64_t DeviceSession::scratch_bytes(const DeviceModel& dm, int64_t max_tokens) {
  return session_bytes(dm.device(), dm.model().hparams(), max_tokens, needs_of(dm),
                       op_needs_of(dm, max_tokens));
}

uint64_t DeviceSession::kv_layer_bytes(const ops::Device& dev, const LlamaHParams& hp,
                                      int n_ctx) {
  return 2 * dev.charge_bytes(kv_half_bytes(hp, n_ctx));
}

Result<std::unique_ptr<DeviceSession>> DeviceSession::create(const DeviceModel& dm, int n_ctx,
                                                             int64_t max_tokens) {
  const LlamaHParams& hp = dm.model().hparams();
  if (n_ctx <= 0 || max_tokens <= 0)
    return Status::Error("device session: context and batch must be positive");
  std::unique_ptr<DeviceSession> s(new DeviceSession());
  s->dm_ = &dm;
  s->n_ctx_ = n_ctx;
  s->max_tokens_ = max_tokens;
  const uint64_t kv_layer = kv_half_bytes(hp, n_ctx);
  s->k_.assign(static_cast<size_t>(hp.n_layer), nullptr);
  s->v_.assign(static_cast<size_t>(hp.n_layer), nullptr);
  const Needs needs = needs_of(dm);
  for (int il = 0; il < hp.n_layer; ++il) {
    if (!dm.layer(il).attn) continue;
    const std::string kn = "KV cache (K) of layer " + std::to_string(il);
    const std::string vn = "KV cache (V) of layer " + std::to_string(il);
    HC_ASSIGN_OR_RETURN(void* k, s->dev_alloc(kv_layer, kn.c_str()));
    HC_ASSIGN_OR_RETURN(void* v, s->dev_alloc(kv_layer, vn.c_str()));
    s->k_[static_cast<size_t>(il)] = static_cast<fp16_t*>(k);
    s->v_[static_cast<size_t>(il)] = static_cast<fp16_t*>(v);
    s->kv_bytes_ += 2 * kv_layer;
  }
  if (!any(needs)) return s;  // nothing on the device: llama_forward never touches it
  const uint64_t T = static_cast<uint64_t>(max_tokens);
  Status st = Status::Ok();
  for_each_buffer(hp, T, needs, [&](auto member, uint64_t bytes, const char* what) {
    if (!st.ok()) return;
    auto p = s->dev_alloc(bytes, what);
    using Ptr = std::remove_reference_t<decltype(s.get()->*member)>;
    if (p.ok()) s.get()->*member = static_cast<Ptr>(*p);
    else st = p.status();
  });
  HC_TRY(st);
  // The device's own scratch for this session's largest operations, charged now.
  HC_TRY(dm.device().reserve_scratch(op_needs_of(dm, max_tokens)));
  // Pinned host staging for the copies.
  const uint64_t embd = T * hp.n_embd * sizeof(float);
  HC_ASSIGN_OR_RETURN(void* hx, s->host_alloc(embd));
  HC_ASSIGN_OR_RETURN(void* ho, s->host_alloc(embd));
  s->h_x = static_cast<float*>(hx);
  s->h_out = static_cast<float*>(ho);
  if (needs.attn) {
    HC_ASSIGN_OR_RETURN(void* hp_, s->host_alloc(sizeof(int32_t)));
    s->h_pos = static_cast<int32_t*>(hp_);
  }
  const char* rep = std::getenv("HOTCOLD_DEVICE_REPLAY");
  s->replay = !(rep && std::string(rep) == "0");
  if (s->replay && dm.device().can_record())
    s->segments = std::make_unique<SegmentRecorder>(dm.device());
  if (needs.hot) {
    HC_ASSIGN_OR_RETURN(void* hidx, s->host_alloc(T * hp.n_ff * sizeof(int32_t)));
    HC_ASSIGN_OR_RETURN(void* hfire, s->host_alloc(T * hp.n_ff));
    s->h_idx = static_cast<int32_t*>(hidx);
    s->h_fire = static_cast<uint8_t*>(hfire);
  }
  if (needs.pred_rank > 0) {
    HC_ASSIGN_OR_RETURN(void* hf,
                        s->host_alloc(std::max<uint64_t>(T, hp.n_layer) * hp.n_ff));
    s->h_pred_fire = static_cast<uint8_t*>(hf);
    s->deferred.reserve(static_cast<size_t>(hp.n_layer));
    HC_TRY(dm.device().upload(s->slots, dm.neuron_ids().data(),
                              static_cast<uint64_t>(hp.n_ff) * sizeof(int32_t)));
  }
  if (needs.output) {
    HC_ASSIGN_OR_RETURN(void* hl, s->host_alloc(T * hp.n_vocab * sizeof(float)));
    HC_ASSIGN_OR_RETURN(void* hi, s->host_alloc(T * sizeof(int32_t)));
    s->h_logits = static_cast<float*>(hl);
    s->h_ids = static_cast<int32_t*>(hi);
  }
  if (needs.moe) {
    const uint64_t routes = T * static_cast<uint64_t>(hp.n_expert_used);
    HC_ASSIGN_OR_RETURN(void* ht, s->host_alloc(routes * sizeof(int32_t)));
    HC_ASSIGN_OR_RETURN(void* hr, s->host_alloc(routes * sizeof(int32_t)));
    HC_ASSIGN_OR_RETURN(void* hw, s->host_alloc(routes * sizeof(float)));
    HC_ASSIGN_OR_RETURN(void* ho, s->host_alloc(routes * hp.n_embd * sizeof(float)));
    s->h_route_tok = static_cast<int32_t*>(ht);
    s->h_route_row = static_cast<int32_t*>(hr);
    s->h_route_w = static_cast<float*>(hw);
    s->h_routes_out = static_cast<float*>(ho);
  }
  return s;
}

}  // namespace hc
