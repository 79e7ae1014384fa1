#include "model/device_step.h"

#include <cstring>

#include "core/log.h"
#include "model/hybrid_forward.h"

namespace hc {

namespace {

// Every layer's attention and FFN on the device with nothing for the host (step_on_device in
// the header), and the output.
bool step_on_device(const DeviceSession& ds, const ForwardScratch& s) {
  const DeviceModel& dm = ds.dm();
  if (!dm.output_on_device()) return false;
  if (dm.whole()) return true;  // dense
  const LlamaModel& model = dm.model();
  const SparseScratch& sc = s.sparse_scratch;
  if (model.hparams().is_moe()) {  // every layer's experts routed there
    for (int il = 0; il < model.hparams().n_layer; ++il)
      if (!routes_on_device(dm.layer(il), s, 1, false, true)) return false;
    return true;
  }
  // Thresholds fixed for the session (no dynamic sparsity), no audits.
  if (!s.sparse || sc.monitor || sc.thresholds || sc.predictor_thresholds) return false;
  for (int il = 0; il < model.hparams().n_layer; ++il) {
    const DeviceLayer& d = dm.layer(il);
    if (!d.attn || d.moe()) return false;
    if (d.ffn_dense) continue;
    if (!d.hybrid() || !d.cold.empty() || !can_merge_on_device(model, d, il)) return false;
  }
  return true;
}

}  // namespace

bool device_step_applies(const DeviceSession& ds, const ForwardScratch& s, int64_t n_tok,
                         bool per_row, int64_t first_out, bool want_out) {
  return n_tok == 1 && !per_row && first_out == 0 && want_out && ds.pos && ds.h_pos &&
         ds.dm().device().can_record() && step_on_device(ds, s);
}

namespace {

// The step's operations, inputs copied in first (so that queueing it again is always safe):
// each layer as run_layer queues it for this token (llama_forward.cpp).
DeviceOutputCopy queue_step(const LlamaModel& model, ForwardScratch& s, DeviceSession& ds,
                            ThreadPool& pool, int pos, float* out, int32_t* out_id) {
  const LlamaHParams& hp = model.hparams();
  ops::Device& dev = ds.dm().device();
  dev.copy_to_device(ds.x, ds.h_x, static_cast<uint64_t>(hp.n_embd) * sizeof(float));
  dev.copy_to_device(ds.pos, ds.h_pos, sizeof(int32_t));
  ds.deferred.clear();
  for (int il = 0; il < hp.n_layer; ++il) {
    device_attention(model, ds, il, 1, ops::DevicePos(pos, ds.pos));
    const DeviceLayer& d = ds.dm().layer(il);
    if (d.ffn_dense) {
      device_ffn_dense(model, ds, il, 1);
      continue;
    }
    if (d.moe()) {  // routed there (step_on_device)
      device_moe_ffn(model, ds, il, s.moe);
      continue;
    }
    if (d.predicts())
      device_predict(model, ds, il, 1, false,
                     s.sparse_scratch.predictor_threshold(*s.sparse, il), false);
    // No host half (step_on_device): device operations only, no sync, nothing fails here.
    (void)hybrid_ffn(model, *s.sparse, ds, il, s, pool, 1, false, true);
  }
  queue_deferred_masks(model, ds);
  return queue_device_output(model, ds, 0, 1, out, false, out_id);
}

void add_stats(SparseStats& to, const SparseStats& d) {
  to.neurons += d.neurons, to.fired += d.fired, to.computed += d.computed;
  to.active += d.active, to.dense_batches += d.dense_batches;
  to.device_computed += d.device_computed, to.bytes += d.bytes;
  to.device_bytes += d.device_bytes;
}

SparseStats minus(const SparseStats& a, const SparseStats& b) {
  SparseStats d;
  d.neurons = a.neurons - b.neurons, d.fired = a.fired - b.fired;
  d.computed = a.computed - b.computed, d.active = a.active - b.active;
  d.dense_batches = a.dense_batches - b.dense_batches;
  d.device_computed = a.device_computed - b.device_computed;
  d.bytes = a.bytes - b.bytes, d.device_bytes = a.device_bytes - b.device_bytes;
  return d;
}

}  // namespace

Status device_step(const LlamaModel& model, ForwardScratch& s, DeviceSession& ds,
                   ThreadPool& pool, const float* x_host, int pos, float* out, int32_t* out_id) {
  ops::Device& dev = ds.dm().device();
  SparseStats& stats = s.sparse_scratch.stats;
  const int kind = out_id ? 1 : 0;
  std::memcpy(ds.h_x, x_host, static_cast<size_t>(model.hparams().n_embd) * sizeof(float));
  ds.h_pos[0] = pos;
  DeviceOutputCopy c;
  if (ds.step_graph[kind] >= 0) {
    // What queueing the step counts (the statistics its queueing adds, the layers whose masks
    // come back), counted again for the replay.
    c = device_output_copy(model, ds, 1, out, out_id);
    dev.replay(ds.step_graph[kind]);
    add_stats(stats, ds.step_stats[kind]);
    s.moe.stats += ds.step_moe_stats[kind];
    ds.deferred = ds.step_deferred;
  } else if (ds.replay && !ds.step_unrecordable[kind]) {
    const SparseStats before = stats;
    const MoeStats moe_before = s.moe.stats;
    dev.begin_record();
    c = queue_step(model, s, ds, pool, pos, out, out_id);
    auto id = dev.end_record();
    if (id.ok()) {
      ds.step_graph[kind] = *id;
      ds.step_stats[kind] = minus(stats, before);
      ds.step_moe_stats[kind] = s.moe.stats - moe_before;
      ds.step_deferred = ds.deferred;
    } else {
      ds.step_unrecordable[kind] = true;
      HC_LOG_DEBUG("device step not recorded (every step queued anew): %s",
                   id.status().message().c_str());
      stats = before;
      s.moe.stats = moe_before;
      c = queue_step(model, s, ds, pool, pos, out, out_id);
    }
  } else {
    c = queue_step(model, s, ds, pool, pos, out, out_id);
  }
  HC_TRY(finish_device_output(ds, c));
  take_deferred_masks(model, ds, s.sparse_scratch);
  return Status::Ok();
}

}  // namespace hc
