#include "app/plan_input.h"

#include <algorithm>

#include "model/device_model.h"
#include "model/hybrid_forward.h"
#include "model/llama_forward.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/sparse.h"

namespace hc {

namespace {

uint64_t bytes_of(const TensorView& t) {
  return t.empty() ? 0 : static_cast<uint64_t>(row_bytes(t.type, t.ne0)) * t.ne1;
}
uint64_t row_of(const TensorView& t) {
  return t.empty() ? 0 : static_cast<uint64_t>(row_bytes(t.type, t.ne0));
}

// Layer il's attention tensors (attention block, with the FFN's input norm, which a device
// holding the attention keeps: DeviceModel::place_attention) or all its dense tensors, each
// costed by `bytes` (empty tensors cost nothing): the read and the device-charged figures
// below share these lists.
template <typename Bytes>
uint64_t layer_sum(const LlamaModel& model, int il, bool ffn_too, Bytes bytes) {
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  uint64_t b = 0;
  // The attention block as DeviceModel::place_attention uploads it: with the FFN's norm and a
  // layer of experts' router.
  for (const TensorView* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv,
                              &L.bo, &L.attn_q_norm, &L.attn_k_norm, &L.ffn_norm, &L.ffn_gate_inp})
    if (!t->empty()) b += bytes(*t);
  if (ffn_too) {
    for (const TensorView* t : {&L.ffn_gate, &L.ffn_up, &L.ffn_down})
      if (!t->empty()) b += bytes(*t);
    for (const LlamaLayerWeights::Expert& E : L.experts)
      b += bytes(E.gate) + bytes(E.up) + bytes(E.down);
  }
  return b;
}

}  // namespace

uint64_t layer_attn_bytes(const LlamaModel& model, int il) {
  return layer_sum(model, il, /*ffn_too=*/false, bytes_of);
}

uint64_t layer_dense_bytes(const LlamaModel& model, int il) {
  return layer_sum(model, il, /*ffn_too=*/true, bytes_of);
}

uint64_t layer_attn_store_bytes(const LlamaModel& model, const ops::Device& dev, int il) {
  return layer_sum(model, il, /*ffn_too=*/false,
                   [&](const TensorView& t) { return dev.weight_bytes(t, t.ne1); });
}

uint64_t layer_dense_store_bytes(const LlamaModel& model, const ops::Device& dev, int il) {
  return layer_sum(model, il, /*ffn_too=*/true,
                   [&](const TensorView& t) { return dev.weight_bytes(t, t.ne1); });
}

uint64_t layer_kv_bytes(const LlamaModel& model, int n_ctx) {
  const LlamaHParams& hp = model.hparams();
  return 2ull * static_cast<uint64_t>(n_ctx) * hp.n_head_kv * hp.head_dim * sizeof(fp16_t);
}

Result<sparse::HardwareProfile> measure_hardware(const ops::Device& dev, const LlamaModel& model,
                                                 int n_threads, double host_gbps) {
  sparse::HardwareProfile hw;
  if (host_gbps > 0) {
    hw.host_gbps = host_gbps;
  } else {
    ThreadPool pool(n_threads);
    ops::MembwParams mp;
    mp.array_bytes = int64_t{64} << 20;
    mp.reps = 5;
    mp.read_only = true;
    HC_ASSIGN_OR_RETURN(ops::MembwResult r, ops::measure_membw(mp, pool));
    hw.host_gbps = r.median_gbs_of(ops::MembwKernel::kRead);
  }
  const ops::DeviceProfile dp = dev.profile();
  hw.dev_gbps = dp.mem_gbps;
  hw.link_gbps = dp.link_gbps;
  hw.op_us = dp.op_us;
  hw.sync_us = dp.sync_us;
  hw.dev_overhead_bytes = dev.overhead_bytes();
  const bool attn = device_blocks_supported(model.hparams());
  const auto fixed = [&](bool with_attn) {
    return model.hparams().is_moe()
               ? DeviceSession::moe_scratch_bytes(dev, model, kMoeForwardUbatch, with_attn, false)
               : DeviceSession::scratch_bytes(dev, model, kForwardUbatch, with_attn, false, true,
                                              false);
  };
  hw.dev_fixed_bytes = fixed(attn);
  hw.dev_attn_fixed_bytes = attn ? hw.dev_fixed_bytes - std::min(hw.dev_fixed_bytes, fixed(false))
                                 : 0;
  return hw;
}

Result<std::vector<double>> expert_probabilities(const LlamaHParams& hp, const ActStats* stats,
                                                 int il) {
  if (!stats)
    return std::vector<double>(static_cast<size_t>(hp.n_expert),
                               static_cast<double>(hp.n_expert_used) / hp.n_expert);
  return sparse::fire_probabilities(stats->expert_count(il), stats->n_tokens());
}

Result<sparse::PlanInput> moe_plan_input_for(const LlamaModel& model, const ActStats* stats,
                                             const sparse::HardwareProfile& hw,
                                             const ops::Device& dev, int n_ctx) {
  const LlamaHParams& hp = model.hparams();
  if (!hp.is_moe()) return Status::Error("moe_plan_input_for: not a mixture-of-experts model");
  if (stats) HC_TRY(stats->check_matches(hp));
  sparse::PlanInput in;
  in.hw = hw;
  in.n_embd = hp.n_embd;
  in.device_reads_all_hot = false;  // the device computes its experts a token routes to
  // Per layer on the device: the route lists and x copied in, per routed expert gather, gate,
  // up, glu, down, scatter, and the outputs copied out (hybrid_forward's hybrid_moe_ffn).
  in.ffn_device_ops = 5 + 6 * hp.n_expert_used;
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
    const LlamaLayerWeights::Expert& E = L.experts[0];  // every expert has its shapes and types
    sparse::LayerCosts c;
    c.attn_bytes = layer_attn_bytes(model, il);
    c.attn_store_bytes = layer_attn_store_bytes(model, dev, il);
    c.kv_read_bytes = layer_kv_bytes(model, n_ctx) / 2;  // a half-full context on average
    c.kv_bytes = DeviceSession::kv_layer_bytes(dev, hp, n_ctx);
    c.neuron_bytes = bytes_of(E.gate) + bytes_of(E.up) + bytes_of(E.down);
    // DeviceModel::place_experts uploads each expert's three matrices.
    c.hot_store_bytes = [d = &dev, E](int64_t n) {
      return static_cast<uint64_t>(n) * (d->weight_bytes(E.gate, E.gate.ne1) +
                                         d->weight_bytes(E.up, E.up.ne1) +
                                         d->weight_bytes(E.down, E.down.ne1));
    };
    c.host_neuron_bytes = c.neuron_bytes;  // a routed host expert is read whole
    c.host_cold_bytes = 0;
    c.host_fixed_bytes = bytes_of(L.ffn_gate_inp) + bytes_of(L.ffn_norm);  // the router
    c.attn_placeable = device_blocks_supported(hp);
    HC_ASSIGN_OR_RETURN(c.fire_prob, expert_probabilities(hp, stats, il));
    in.layers.push_back(std::move(c));
  }
  const LlamaWeights& W = model.weights();
  in.other_s = static_cast<double>(bytes_of(W.output)) / (hw.host_gbps * 1e9);
  HC_TRY(in.validate());
  return in;
}

Result<sparse::PlanInput> plan_input_for(const LlamaModel& model, const ActStats& stats,
                                         const sparse::HardwareProfile& hw,
                                         const ops::Device& dev, int n_ctx, bool predictor) {
  const LlamaHParams& hp = model.hparams();
  HC_TRY(stats.check_matches(hp));
  sparse::PlanInput in;
  in.hw = hw;
  in.n_embd = hp.n_embd;
  in.device_reads_all_hot = !predictor;
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
    sparse::LayerCosts c;
    c.attn_bytes = layer_attn_bytes(model, il);
    c.attn_store_bytes = layer_attn_store_bytes(model, dev, il);
    c.kv_read_bytes = layer_kv_bytes(model, n_ctx) / 2;  // a half-full context on average
    c.kv_bytes = DeviceSession::kv_layer_bytes(dev, hp, n_ctx);
    const TensorView& down = L.ffn_down.empty() ? L.ffn_down_t : L.ffn_down;
    const GgmlType dt = L.ffn_down.empty() ? L.ffn_down_t.type : ops::down_t_type(down.type);
    const uint64_t down_row = static_cast<uint64_t>(row_bytes(dt, hp.n_embd));
    const TensorView gate_b = L.ffn_gate_b.empty() ? TensorView{} : bias_rows(L);  // opt
    c.neuron_bytes = row_of(L.ffn_gate) + row_of(L.ffn_up) + down_row + row_of(gate_b);
    // What DeviceModel::place_layer uploads for n hot neurons: compact gate, up and down_t
    // matrices (down_t as the sparse FFN builds it: no decode layout, unless the file's own).
    const TensorView down_t = L.ffn_down.empty()
                                  ? L.ffn_down_t
                                  : TensorView::make(dt, nullptr, hp.n_embd, hp.n_ff);
    // With a predictor on the device (it follows the attention), also the hot neurons' ids
    // (I32, one per slot): counted whenever the layer has a predictor, an upper bound.
    // (A view without data is "empty": the flag says whether there are ids.)
    const bool pred = predictor && !L.fc1.empty();
    const TensorView ids = TensorView::make(GgmlType::I32, nullptr, 1, hp.n_ff);
    c.hot_store_bytes = [d = &dev, gate = L.ffn_gate, up = L.ffn_up, down_t, gate_b, ids,
                         pred](int64_t n) {
      return d->weight_bytes(gate, n) + (up.empty() ? 0 : d->weight_bytes(up, n)) +
             d->weight_bytes(down_t, n) + (gate_b.empty() ? 0 : d->weight_bytes(gate_b, n)) +
             (pred ? d->weight_bytes(ids, n) : 0);
    };
    // Host: a firing cold neuron costs its up and down rows (and its gate row when a predictor
    // chose it); without a predictor every cold gate row is read for the firing test.
    c.host_neuron_bytes = row_of(L.ffn_up) + down_row + (predictor ? row_of(L.ffn_gate) : 0);
    c.host_cold_bytes = predictor ? 0 : row_of(L.ffn_gate);
    // The predictor (read per token only in predictor mode) follows the attention to the
    // device (DeviceModel::place_layer): charged there as the device stores it.
    c.predictor_bytes = pred ? bytes_of(L.fc1) + bytes_of(L.fc2) : 0;
    c.predictor_follows_attn = pred && device_blocks_supported(hp);
    c.predictor_store_bytes =
        pred ? dev.weight_bytes(L.fc1, L.fc1.ne1) + dev.weight_bytes(L.fc2, L.fc2.ne1) : 0;
    c.attn_placeable = device_blocks_supported(hp);
    c.shares_trip = merges_on_device(model, il);  // x stays on the device (hybrid_forward.h)
    HC_ASSIGN_OR_RETURN(c.fire_prob,
                        sparse::fire_probabilities(stats.fire_count(il), stats.n_tokens()));
    in.layers.push_back(std::move(c));
  }
  const LlamaWeights& W = model.weights();
  in.other_s = static_cast<double>(bytes_of(W.output)) / (hw.host_gbps * 1e9);
  HC_TRY(in.validate());
  return in;
}

}  // namespace hc
