#include "model/hybrid_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/llama_forward.h"
#include "model/moe_ffn.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/sparse.h"

namespace hc {

void DeviceResidual::to_device(const float* x_host, int64_t n) {
  if (on_device) return;
  std::memcpy(ds->h_x, x_host, static_cast<size_t>(n) * sizeof(float));
  ds->device().copy_to_device(ds->x, ds->h_x, static_cast<uint64_t>(n) * sizeof(float));
  on_device = true;
}

Status DeviceResidual::to_host(float* x_host, int64_t n) {
  HC_TRY(read(x_host, n));
  on_device = false;
  return Status::Ok();
}

Status DeviceResidual::read(float* x_host, int64_t n) {
  if (!on_device) return Status::Ok();
  ops::Device& dev = ds->device();
  dev.copy_to_host(ds->h_x, ds->x, static_cast<uint64_t>(n) * sizeof(float));
  HC_TRY(dev.sync());
  std::memcpy(x_host, ds->h_x, static_cast<size_t>(n) * sizeof(float));
  return Status::Ok();
}

bool merges_on_device(const LlamaModel& model, int il) {
  const LlamaHParams& hp = model.hparams();
  return hp.norm == NormKind::kRms && !hp.parallel_block &&
         model.weights().layers[static_cast<size_t>(il)].ffn_down_b.empty();
}

bool can_merge_on_device(const LlamaModel& model, const DeviceLayer& d, int il) {
  return !d.ffn_norm.empty() && merges_on_device(model, il);
}

namespace {

// y = x W^T on the device: rows of independent sequences each as a one-row call computes it
// (per_row), else as one batch.
void device_matmul(ops::Device& dev, bool per_row, const TensorView& w, const float* x,
                   int64_t n_tok, float* y) {
  if (per_row) dev.matmul_rows(w, x, n_tok, y);
  else dev.matmul(w, x, n_tok, y);
}

}  // namespace

void device_attention(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                      ops::DevicePos pos0, std::span<const SeqStep> steps) {
  const LlamaHParams& hp = model.hparams();
  const DeviceLayer& d = ds.dm().layer(il);
  ops::Device& dev = ds.device();
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const bool per_row = !steps.empty();
  const auto mm = [&](const TensorView& w, const float* x, float* y) {
    device_matmul(dev, per_row, w, x, n_tok, y);
  };
  dev.rmsnorm(ds.xb, ds.x, static_cast<const float*>(d.attn_norm.data), n_tok, hp.n_embd,
              hp.rms_eps);
  mm(d.wq, ds.xb, ds.q);
  mm(d.wk, ds.xb, ds.k);
  mm(d.wv, ds.xb, ds.v);
  if (!d.bq.empty()) dev.add_rows(ds.q, static_cast<const float*>(d.bq.data), n_tok, q_dim);
  if (!d.bk.empty()) dev.add_rows(ds.k, static_cast<const float*>(d.bk.data), n_tok, kv_dim);
  if (!d.bv.empty()) dev.add_rows(ds.v, static_cast<const float*>(d.bv.data), n_tok, kv_dim);
  if (hp.qk_norm) {  // qwen3: every head of Q and K RMS-normed (rows of head_dim)
    dev.rmsnorm(ds.q, ds.q, static_cast<const float*>(d.attn_q_norm.data), n_tok * hp.n_head,
                hp.head_dim, hp.rms_eps);
    dev.rmsnorm(ds.k, ds.k, static_cast<const float*>(d.attn_k_norm.data), n_tok * hp.n_head_kv,
                hp.head_dim, hp.rms_eps);
  }
  const float ts = model.rope_theta_scale();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  // RoPE, the KV store and attention of rows [t0, t0 + n) at pos.. of session kv's cache.
  const auto attend = [&](int64_t t0, int64_t n, ops::DevicePos pos, DeviceSession& kv) {
    float *q = ds.q + t0 * q_dim, *k = ds.k + t0 * kv_dim;
    dev.rope(q, n, hp.n_head, hp.head_dim, hp.n_rot, pos, ts, hp.rope_freq_scale,
             ds.dm().rope_freqs(), hp.rope_neox);
    dev.rope(k, n, hp.n_head_kv, hp.head_dim, hp.n_rot, pos, ts, hp.rope_freq_scale,
             ds.dm().rope_freqs(), hp.rope_neox);
    dev.kv_store(k, ds.v + t0 * kv_dim, n, pos, kv_dim, kv.n_ctx(), kv.k_cache(il),
                 kv.v_cache(il));
    const ops::AttentionShape shape{hp.n_head, hp.n_head_kv, hp.head_dim, kv_dim, kv.n_ctx()};
    dev.attention(q, kv.k_cache(il), kv.v_cache(il), pos, n, shape, scale, ds.att + t0 * q_dim);
  };
  if (!per_row) {
    attend(0, n_tok, pos0, ds);
  } else {
    // Each step as its one-token decode: its own position, cache and attention call.
    for (int64_t t = 0; t < n_tok; ++t) attend(t, 1, steps[t].pos, *steps[t].device);
  }
  mm(d.wo, ds.att, ds.proj);
  if (!d.bo.empty()) dev.add_rows(ds.proj, static_cast<const float*>(d.bo.data), n_tok, hp.n_embd);
  dev.add(ds.x, ds.proj, n_tok * hp.n_embd);
}

void device_ffn_dense(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                      bool per_row) {
  const LlamaHParams& hp = model.hparams();
  const DeviceLayer& d = ds.dm().layer(il);
  ops::Device& dev = ds.device();
  const auto mm = [&](const TensorView& w, const float* x, float* y) {
    device_matmul(dev, per_row, w, x, n_tok, y);
  };
  dev.rmsnorm(ds.xb, ds.x, static_cast<const float*>(d.ffn_norm.data), n_tok, hp.n_embd,
              hp.rms_eps);
  mm(d.gate, ds.xb, ds.gate);
  mm(d.up, ds.xb, ds.up);
  dev.glu(ds.gate, ds.up, n_tok, hp.n_ff, glu_kind(hp));
  mm(d.down, ds.gate, ds.proj);
  dev.add(ds.x, ds.proj, n_tok * hp.n_embd);
}

void device_predict(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                    bool per_row, float threshold, bool mask_back) {
  const DeviceLayer& d = ds.dm().layer(il);
  ops::Device& dev = ds.device();
  const int64_t n_ff = model.hparams().n_ff, rank = d.pred_fc1.ne1;
  // The host's predict_firing on the device: its matmul modes (one batch, or every row as
  // its one-token call), relu, and `logit >= threshold`.
  device_matmul(dev, per_row, d.pred_fc1, ds.x, n_tok, ds.pred_hid);
  dev.glu(ds.pred_hid, nullptr, n_tok, rank, ops::GluKind::kReluUngated);
  device_matmul(dev, per_row, d.pred_fc2, ds.pred_hid, n_tok, ds.pred_logit);
  if (!d.hot.empty())
    dev.fire_mask(ds.pred_logit, n_tok, n_ff, static_cast<const int32_t*>(d.hot_ids.data),
                  static_cast<int64_t>(d.hot.size()), threshold, ds.fire);
  if (mask_back) {
    dev.fire_mask(ds.pred_logit, n_tok, n_ff, nullptr, n_ff, threshold, ds.pred_fire);
    dev.copy_to_host(ds.h_pred_fire, ds.pred_fire, static_cast<uint64_t>(n_tok * n_ff));
  } else {  // a decode step wholly on the device: the mask waits in the layer's slot
    dev.fire_mask(ds.pred_logit, 1, n_ff, nullptr, n_ff, threshold, ds.pred_fire + il * n_ff);
    ds.deferred.push_back(il);
  }
}

void take_device_prediction(const LlamaModel& model, const DeviceSession& ds, int il,
                            int64_t n_tok, SparseScratch& sc) {
  const size_t n = static_cast<size_t>(n_tok * model.hparams().n_ff);
  if (sc.fire.size() < n) sc.fire.resize(n);
  std::memcpy(sc.fire.data(), ds.h_pred_fire, n);
  sc.fire_given = il;
}

bool hybrid_host_half(const DeviceLayer& d, const SparseScratch& sc, bool resident,
                      int64_t n_tok) {
  // A predictor's mask of a decode step's layer can wait in its slot until the pass ends
  // (queue_deferred_masks); a batch's takes the layer's sync.
  return !resident || !d.cold.empty() || (sc.monitor && sc.monitor->audit()) ||
         (d.predicts() && n_tok > 1);
}

namespace {

// The statistics of the device's half of a predictor-driven layer from its mask `fire`
// ([n_tok, n_ff], every neuron): per token the fired hot neurons, and the union's rows read.
void count_device_firing(const DeviceLayer& d, const uint8_t* fire, int64_t n_tok, int64_t n_ff,
                         SparseScratch& sc) {
  uint64_t fired = 0;
  int64_t rows = 0;
  for (const int32_t i : d.hot) {
    uint8_t any = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
      fired += fire[t * n_ff + i];
      any |= fire[t * n_ff + i];
    }
    rows += any;
  }
  sc.stats.fired += fired;
  sc.stats.device_computed += static_cast<uint64_t>(n_tok * rows);
  sc.stats.device_bytes += rows_bytes(d.hot_gate, rows) + rows_bytes(d.hot_up, rows) +
                           rows_bytes(d.hot_down_t, rows) + rows_bytes(d.hot_gate_b, rows);
}

}  // namespace

void queue_deferred_masks(const LlamaModel& model, DeviceSession& ds) {
  if (ds.deferred.empty()) return;
  const uint64_t n_ff = static_cast<uint64_t>(model.hparams().n_ff);
  ds.device().copy_to_host(ds.h_pred_fire, ds.pred_fire,
                                static_cast<uint64_t>(model.hparams().n_layer) * n_ff);
}

void take_deferred_masks(const LlamaModel& model, DeviceSession& ds, SparseScratch& sc) {
  const int64_t n_ff = model.hparams().n_ff;
  for (const int il : ds.deferred)
    count_device_firing(ds.dm().layer(il), ds.h_pred_fire + il * n_ff, 1, n_ff, sc);
  ds.deferred.clear();
}

namespace {

// Predictor mode: the device's share of the predicted set, as its local indices (ascending)
// and each token's mask over them, staged in pinned memory. Returns the number of indices.
int64_t stage_hot_firing(const DeviceLayer& d, SparseScratch& sc, int64_t n_tok,
                         int64_t n_ff, DeviceSession& ds) {
  int64_t n_idx = 0;
  for (size_t j = 0; j < d.hot.size(); ++j) {
    const int32_t i = d.hot[j];
    uint8_t any = 0;
    for (int64_t t = 0; t < n_tok; ++t) any |= sc.fire[t * n_ff + i];
    if (any) ds.h_idx[n_idx++] = static_cast<int32_t>(j);
  }
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < n_idx; ++j) {
      const uint8_t f = sc.fire[t * n_ff + d.hot[static_cast<size_t>(ds.h_idx[j])]];
      ds.h_fire[t * n_idx + j] = f;
      sc.stats.fired += f;
    }
  return n_idx;
}

// The same for independent sequences' rows, each as its one-token call stages it: token t's
// own fired hot neurons (local indices, ascending) at h_idx[off[t] .. off[t + 1]), and a mask
// of ones (each list fires every entry) in h_fire[0 .. *longest), *longest the longest list.
// Returns off[n_tok].
int64_t stage_hot_firing_rows(const DeviceLayer& d, SparseScratch& sc, int64_t n_tok,
                              int64_t n_ff, DeviceSession& ds, std::vector<int64_t>& off,
                              int64_t* longest_out) {
  off.assign(static_cast<size_t>(n_tok) + 1, 0);
  int64_t n = 0, longest = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const uint8_t* f = sc.fire.data() + t * n_ff;
    for (size_t j = 0; j < d.hot.size(); ++j)
      if (f[d.hot[j]]) ds.h_idx[n++] = static_cast<int32_t>(j);
    off[static_cast<size_t>(t) + 1] = n;
    longest = std::max(longest, n - off[static_cast<size_t>(t)]);
  }
  sc.stats.fired += static_cast<uint64_t>(n);
  std::memset(ds.h_fire, 1, static_cast<size_t>(longest));
  *longest_out = longest;
  return n;
}

// The audit of a hybrid layer for sc.monitor: act(gate) of every neuron and the firing
// decision both halves took. With a predictor: the dense gate, and the predictor's mask. With
// thresholds: the host's cold act (sparse_ffn_subset leaves it in sc.act, [n_tok, |cold|]) plus
// the hot neurons' gate computed here from the host's rows, each fired when |act| > threshold.
void audit_hybrid(const LlamaModel& model, const SparseFfn& sparse, const DeviceLayer& d, int il,
                  ops::MatmulInput& in, SparseScratch& sc, ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const int64_t n_ff = hp.n_ff, n_tok = in.n_tok();
  if (sparse.use_predictor()) {
    audit_activations(model, il, in, sc, pool);
    sc.monitor->observe(il, sc.audit_act.data(), sc.fire.data(), n_tok, n_ff);
    return;
  }
  const int64_t n_hot = static_cast<int64_t>(d.hot.size()),
                n_cold = static_cast<int64_t>(d.cold.size());
  const size_t n = static_cast<size_t>(n_tok * n_ff);
  if (sc.audit_act.size() < n) sc.audit_act.resize(n);
  if (sc.audit_fire.size() < n) sc.audit_fire.resize(n);
  if (sc.audit_gate.size() < static_cast<size_t>(n_tok * n_hot))
    sc.audit_gate.resize(static_cast<size_t>(n_tok * n_hot));
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  ops::sparse_rows(L.ffn_gate, in, d.hot.data(), n_hot, sc.audit_gate.data(), pool);
  if (!L.ffn_gate_b.empty()) {  // opt: the hot neurons' gate bias, as the device adds it
    const auto* b = static_cast<const float*>(L.ffn_gate_b.data);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_hot; ++j) sc.audit_gate[t * n_hot + j] += b[d.hot[j]];
  }
  sc.stats.bytes += rows_bytes(L.ffn_gate, n_hot);
  ffn_activation(hp.ffn_act, sc.audit_gate.data(), sc.audit_gate.data(), n_tok * n_hot);
  const float tau = sc.threshold(sparse, il);
  for (int64_t t = 0; t < n_tok; ++t) {
    float* a = sc.audit_act.data() + t * n_ff;
    for (int64_t j = 0; j < n_hot; ++j) a[d.hot[j]] = sc.audit_gate[t * n_hot + j];
    for (int64_t c = 0; c < n_cold; ++c) a[d.cold[c]] = sc.act[t * n_cold + c];
    uint8_t* f = sc.audit_fire.data() + t * n_ff;
    for (int64_t i = 0; i < n_ff; ++i) f[i] = std::fabs(a[i]) > tau;
  }
  sc.monitor->observe(il, sc.audit_act.data(), sc.audit_fire.data(), n_tok, n_ff);
}

}  // namespace

Status hybrid_ffn(const LlamaModel& model, const SparseFfn& sparse, DeviceSession& ds, int il,
                  ForwardScratch& s, ThreadPool& pool, int64_t n_tok, bool per_row,
                  bool x_on_device) {
  const LlamaHParams& hp = model.hparams();
  const DeviceLayer& d = ds.dm().layer(il);
  if (x_on_device && !can_merge_on_device(model, d, il))
    return Status::Error("hybrid FFN of layer " + std::to_string(il) +
                         ": this layer's FFN cannot be merged on the device");
  ops::Device& dev = ds.device();
  SparseScratch& sc = s.sparse_scratch;
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const uint64_t xbytes = static_cast<uint64_t>(n_tok * n_embd) * sizeof(float);
  const ops::GluKind kind = glu_kind(hp);
  const bool host_half = hybrid_host_half(d, sc, x_on_device, n_tok);
  if (sparse.use_predictor() && d.predicts() && sc.fire_given == il)
    sc.fire_given = -1;  // the mask came back for this layer (run_layer): read below
  // Device half first, so it runs while the host computes its half. Its input: normed there
  // from its own x, or the host's normed input copied over.
  if (x_on_device) {
    dev.rmsnorm(ds.xb, ds.x, static_cast<const float*>(d.ffn_norm.data), n_tok, n_embd,
                hp.rms_eps);
  } else {
    std::memcpy(ds.h_x, s.xb.data(), xbytes);
    dev.copy_to_device(ds.xb, ds.h_x, xbytes);
  }
  const auto n_hot = static_cast<int64_t>(d.hot.size());
  if (sparse.use_predictor() && d.predicts()) {
    // The device's own mask (device_predict, queued after its attention) over every hot slot:
    // ffn_rows reads only the rows some token fires. Rows of independent sequences each as
    // its one-token call.
    if (per_row) {
      for (int64_t t = 0; t < n_tok; ++t)
        dev.ffn_rows(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb + t * n_embd, 1,
                     ds.slots, n_hot, ds.fire + t * n_hot, kind, ds.proj + t * n_embd);
    } else {
      dev.ffn_rows(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb, n_tok, ds.slots, n_hot,
                   ds.fire, kind, ds.proj);
    }
    // The mask came back with x when the host has a half; else it is counted when the pass
    // ends (take_deferred_masks).
    if (host_half) count_device_firing(d, sc.fire.data(), n_tok, n_ff, sc);
  } else if (sparse.use_predictor() && per_row) {
    // One ffn_rows call per row over that row's own list: a device's reduction over the list
    // may depend on its length (CUDA splits it), so a union would change the rows' bits.
    predict_firing(model, sparse, il, s.x.data(), n_tok, sc, pool);
    std::vector<int64_t>& off = sc.row_offsets;
    int64_t longest = 0;
    const int64_t n_all = stage_hot_firing_rows(d, sc, n_tok, n_ff, ds, off, &longest);
    if (n_all > 0) {
      dev.copy_to_device(ds.idx, ds.h_idx, static_cast<uint64_t>(n_all) * sizeof(int32_t));
      dev.copy_to_device(ds.fire, ds.h_fire, static_cast<uint64_t>(longest));
    }
    for (int64_t t = 0; t < n_tok; ++t) {
      const int64_t b = off[static_cast<size_t>(t)], n = off[static_cast<size_t>(t) + 1] - b;
      dev.ffn_rows(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb + t * n_embd, 1,
                   ds.idx + b, n, ds.fire, kind, ds.proj + t * n_embd);
    }
    sc.stats.device_computed += static_cast<uint64_t>(n_all);
    sc.stats.device_bytes += rows_bytes(d.hot_gate, n_hot) + rows_bytes(d.hot_up, n_hot) +
                             rows_bytes(d.hot_down_t, n_hot) + rows_bytes(d.hot_gate_b, n_hot);
  } else if (sparse.use_predictor()) {
    predict_firing(model, sparse, il, s.x.data(), n_tok, sc, pool);
    const int64_t n_idx = stage_hot_firing(d, sc, n_tok, n_ff, ds);
    if (n_idx > 0) {
      dev.copy_to_device(ds.idx, ds.h_idx, static_cast<uint64_t>(n_idx) * sizeof(int32_t));
      dev.copy_to_device(ds.fire, ds.h_fire, static_cast<uint64_t>(n_tok * n_idx));
    }
    dev.ffn_rows(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb, n_tok, ds.idx, n_idx,
                 ds.fire, kind, ds.proj);
    sc.stats.device_computed += static_cast<uint64_t>(n_tok * n_idx);
    sc.stats.device_bytes += rows_bytes(d.hot_gate, n_idx) + rows_bytes(d.hot_up, n_idx) +
                             rows_bytes(d.hot_down_t, n_idx) + rows_bytes(d.hot_gate_b, n_idx);
  } else {
    if (per_row)
      dev.ffn_threshold_rows(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb, n_tok,
                             sc.threshold(sparse, il), kind, ds.proj);
    else
      dev.ffn_threshold(d.hot_gate, d.bias(), d.hot_up, d.hot_down_t, ds.xb, n_tok,
                        sc.threshold(sparse, il), kind, ds.proj);
    sc.stats.device_computed += static_cast<uint64_t>(n_tok) * d.hot.size();
    sc.stats.device_bytes += rows_bytes(d.hot_gate, n_hot) + rows_bytes(d.hot_up, n_hot) +
                             rows_bytes(d.hot_down_t, n_hot) + rows_bytes(d.hot_gate_b, n_hot);
  }
  sc.stats.neurons += static_cast<uint64_t>(n_tok * n_ff);
  if (!host_half) {  // the whole FFN on the device: x += its output, nothing crosses
    dev.add(ds.x, ds.proj, n_tok * n_embd);
    return Status::Ok();
  }
  if (!x_on_device) dev.copy_to_host(ds.h_out, ds.proj, xbytes);
  ds.cut();  // the device's half is submitted before the host computes its own
  // Host half: the cold neurons.
  sparse_ffn_subset(model, sparse, il, s.in, d.cold.data(), static_cast<int64_t>(d.cold.size()),
                    s.proj.data(), sc, pool);
  // An audit (while the device works): every neuron's act and firing, the device's included.
  if (sc.monitor && sc.monitor->audit()) audit_hybrid(model, sparse, d, il, s.in, sc, pool);
  if (x_on_device) {
    // x += hot + cold on the device (the same sum as the host's cold + hot below). h_out is
    // free to stage it: the next read of x waits for this copy.
    std::memcpy(ds.h_out, s.proj.data(), xbytes);
    dev.copy_to_device(ds.cold, ds.h_out, xbytes);
    dev.add(ds.proj, ds.cold, n_tok * n_embd);
    dev.add(ds.x, ds.proj, n_tok * n_embd);
    return Status::Ok();
  }
  HC_TRY(dev.sync());
  // x += cold + hot (one fixed order, so results do not depend on which half finished first).
  ops::add_inplace(s.proj.data(), ds.h_out, n_tok * n_embd);
  add_ffn_out(model, il, s, n_tok);
  return Status::Ok();
}

namespace {

// Queues the device's experts of layer il over their routes in s.moe.routing: each route's
// token, output row (its position in this list) and weight staged and copied over, then per
// expert gather (several tokens), gate, up, glu, down and the weighted scatter into
// ds.routes_out, whose rows are copied back to ds.h_routes_out. row_of[slot] = the route's
// row there, or -1 for a route the host computes. Returns the number of device routes.
int64_t queue_device_experts(const LlamaModel& model, DeviceSession& ds, const DeviceLayer& d,
                             MoeScratch& sc, std::vector<int32_t>& row_of, bool per_row) {
  const LlamaHParams& hp = model.hparams();
  ops::Device& dev = ds.device();
  const MoeRouting& r = sc.routing;
  const int64_t n_embd = hp.n_embd;
  row_of.assign(static_cast<size_t>(r.n_tok * r.k), -1);
  int64_t n = 0;
  for (size_t slot = 0; slot < d.expert_of.size(); ++slot) {
    const int e = d.expert_of[slot];
    for (int64_t j = r.offset[e]; j < r.offset[e + 1]; ++j) {
      const int32_t route = r.route[static_cast<size_t>(j)];
      ds.h_route_tok[n] = route / r.k;
      ds.h_route_row[n] = static_cast<int32_t>(n);
      ds.h_route_w[n] = r.weight[static_cast<size_t>(route)];
      row_of[static_cast<size_t>(route)] = static_cast<int32_t>(n);
      ++n;
    }
  }
  if (n == 0) return 0;
  dev.copy_to_device(ds.route_tok, ds.h_route_tok, static_cast<uint64_t>(n) * sizeof(int32_t));
  dev.copy_to_device(ds.route_row, ds.h_route_row, static_cast<uint64_t>(n) * sizeof(int32_t));
  dev.copy_to_device(ds.route_w, ds.h_route_w, static_cast<uint64_t>(n) * sizeof(float));
  const ops::GluKind kind = glu_kind(hp);
  int64_t at = 0;
  for (size_t slot = 0; slot < d.expert_of.size(); ++slot) {
    const int64_t rows = r.n_routes(d.expert_of[slot]);
    if (rows == 0) continue;
    const LlamaLayerWeights::Expert& E = d.exp[slot];
    const float* xe = ds.xb + int64_t{ds.h_route_tok[at]} * n_embd;  // one token: in place
    if (rows > 1) {
      dev.get_rows(ds.xe, ds.xb, ds.route_tok + at, rows, n_embd);
      xe = ds.xe;
    }
    // Independent sequences' routes: each as its one-route matmul.
    device_matmul(dev, per_row, E.gate, xe, rows, ds.gate);
    device_matmul(dev, per_row, E.up, xe, rows, ds.up);
    dev.glu(ds.gate, ds.up, rows, hp.n_ff, kind);
    device_matmul(dev, per_row, E.down, ds.gate, rows, ds.proj);
    dev.set_rows_scaled(ds.routes_out, ds.proj, ds.route_row + at, ds.route_w + at, rows, n_embd);
    sc.stats.bytes_device += rows_bytes(E.gate, E.gate.ne1) + rows_bytes(E.up, E.up.ne1) +
                             rows_bytes(E.down, E.down.ne1);
    ++sc.stats.expert_calls_device;
    at += rows;
  }
  dev.copy_to_host(ds.h_routes_out, ds.routes_out,
                   static_cast<uint64_t>(n * n_embd) * sizeof(float));
  return n;
}

}  // namespace

Status hybrid_moe_ffn(const LlamaModel& model, DeviceSession& ds, int il, ForwardScratch& s,
                      ThreadPool& pool, int64_t n_tok, bool per_row) {
  const LlamaHParams& hp = model.hparams();
  const DeviceLayer& d = ds.dm().layer(il);
  ops::Device& dev = ds.device();
  MoeScratch& sc = s.moe;
  const int64_t n_embd = hp.n_embd;
  // The router on the host (it decides what each side computes), then the device's experts
  // first, so they run while the host computes the others.
  moe_router(model, il, s.in, sc, pool, nullptr);
  const uint64_t xbytes = static_cast<uint64_t>(n_tok * n_embd) * sizeof(float);
  std::memcpy(ds.h_x, s.xb.data(), xbytes);
  dev.copy_to_device(ds.xb, ds.h_x, xbytes);
  const int64_t n_dev = queue_device_experts(model, ds, d, sc, sc.row_on_device, per_row);
  ds.cut();  // submitted before the host computes its experts
  const MoeRouting& r = sc.routing;
  if (sc.slots.size() < static_cast<size_t>(n_tok * r.k * n_embd))
    sc.slots.resize(static_cast<size_t>(n_tok * r.k * n_embd));
  for (int e = 0; e < hp.n_expert; ++e)
    if (d.slot_of[static_cast<size_t>(e)] < 0)
      moe_expert(model, il, e, s.xb.data(), sc, pool, s.in.mode(), nullptr);
  HC_TRY(dev.sync());
  sc.stats.routes += static_cast<uint64_t>(n_tok * r.k);
  sc.stats.routes_device += static_cast<uint64_t>(n_dev);
  // Each token's outputs in top-k order, wherever they were computed: host-only's bits when the
  // device computes as the host does (the CPU device).
  moe_sum_slots(sc, n_embd, s.proj.data(), ds.h_routes_out);
  add_ffn_out(model, il, s, n_tok);
  return Status::Ok();
}

bool routes_on_device(const DeviceLayer& d, const ForwardScratch& s, int64_t n_tok, bool per_row,
                      bool x_on_device) {
  // The routes' gate / up rows go to the session's [max_tokens, n_ff] buffers.
  return d.routes() && n_tok == 1 && !per_row && x_on_device && !s.moe.monitor && !s.observer &&
         s.device && s.device->moe_logits &&
         s.device->max_tokens() >= s.device->dm().model().hparams().n_expert_used;
}

void device_moe_ffn(const LlamaModel& model, DeviceSession& ds, int il, MoeScratch& sc) {
  const LlamaHParams& hp = model.hparams();
  const DeviceLayer& d = ds.dm().layer(il);
  ops::Device& dev = ds.device();
  const int k = hp.n_expert_used;
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  dev.rmsnorm(ds.xb, ds.x, static_cast<const float*>(d.ffn_norm.data), 1, n_embd, hp.rms_eps);
  dev.matmul(d.router, ds.xb, 1, ds.moe_logits);
  dev.moe_topk(ds.moe_logits, 1, hp.n_expert, k, moe_gate(hp), ds.route_tok, ds.route_w);
  // Each route as the host's one-token expert call: gate and up of the same input, the GLU,
  // down of the route's own h; then the weighted sum in top-k order.
  dev.matmul_id(d.gate_exps, n_ff, ds.route_tok, k, ds.xb, 0, ds.gate);
  dev.matmul_id(d.up_exps, n_ff, ds.route_tok, k, ds.xb, 0, ds.up);
  dev.glu(ds.gate, ds.up, k, n_ff, glu_kind(hp));
  dev.matmul_id(d.down_exps, n_embd, ds.route_tok, k, ds.gate, n_ff, ds.routes_out);
  dev.moe_combine(ds.routes_out, ds.route_w, 1, k, n_embd, ds.proj);
  dev.add(ds.x, ds.proj, n_embd);
  const LlamaLayerWeights::Expert& E = d.exp[0];
  sc.stats.routes += static_cast<uint64_t>(k);
  sc.stats.routes_device += static_cast<uint64_t>(k);
  sc.stats.expert_calls_device += static_cast<uint64_t>(k);  // a token's k experts differ
  sc.stats.bytes_device += rows_bytes(d.router, d.router.ne1) +
                           static_cast<uint64_t>(k) * (rows_bytes(E.gate, E.gate.ne1) +
                                                       rows_bytes(E.up, E.up.ne1) +
                                                       rows_bytes(E.down, E.down.ne1));
}

DeviceOutputCopy queue_device_output(const LlamaModel& model, DeviceSession& ds, int64_t first,
                                     int64_t n_tok, float* out, bool per_row, int32_t* out_id) {
  const LlamaHParams& hp = model.hparams();
  const DeviceModel& dm = ds.dm();
  ops::Device& dev = dm.device();
  const int64_t n_out = n_tok - first;
  dev.rmsnorm(ds.xb, ds.x + first * hp.n_embd, static_cast<const float*>(dm.output_norm().data),
              n_out, hp.n_embd, hp.rms_eps);
  device_matmul(dev, per_row, dm.output(), ds.xb, n_out, ds.logits);
  if (out_id) dev.argmax(ds.logits, n_out, hp.n_vocab, ds.ids);
  const DeviceOutputCopy c = device_output_copy(model, ds, n_out, out, out_id);
  dev.copy_to_host(c.staged, out_id ? static_cast<const void*>(ds.ids) : ds.logits, c.bytes);
  return c;
}

DeviceOutputCopy device_output_copy(const LlamaModel& model, const DeviceSession& ds,
                                    int64_t n_out, float* out, int32_t* out_id) {
  // What comes back: the logits, or each row's greedy id alone.
  if (out_id) return {ds.h_ids, out_id, static_cast<uint64_t>(n_out) * sizeof(int32_t)};
  return {ds.h_logits, out,
          static_cast<uint64_t>(n_out * model.hparams().n_vocab) * sizeof(float)};
}

Status device_output(const LlamaModel& model, DeviceSession& ds, int64_t first, int64_t n_tok,
                     float* out, bool per_row, int32_t* out_id) {
  return finish_device_output(
      ds, queue_device_output(model, ds, first, n_tok, out, per_row, out_id));
}

Status finish_device_output(DeviceSession& ds, const DeviceOutputCopy& c) {
  HC_TRY(ds.device().sync());
  std::memcpy(c.dst, c.staged, c.bytes);
  return Status::Ok();
}

}  // namespace hc
