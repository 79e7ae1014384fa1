#include "model/device_step.h"

#include <cstring>

#include "core/log.h"
#include "model/hybrid_forward.h"

namespace hc {

bool device_step_applies(const DeviceSession& ds, int64_t n_tok, bool per_row, int64_t first_out,
                         bool want_out) {
  return n_tok == 1 && !per_row && first_out == 0 && want_out && ds.dm().whole() && ds.pos &&
         ds.h_pos && ds.dm().device().can_record();
}

namespace {

// The step's operations, inputs copied in first (so that queueing it again is always safe).
DeviceOutputCopy queue_step(const LlamaModel& model, DeviceSession& ds, int pos, float* out,
                            int32_t* out_id) {
  const LlamaHParams& hp = model.hparams();
  ops::Device& dev = ds.dm().device();
  dev.copy_to_device(ds.x, ds.h_x, static_cast<uint64_t>(hp.n_embd) * sizeof(float));
  dev.copy_to_device(ds.pos, ds.h_pos, sizeof(int32_t));
  for (int il = 0; il < hp.n_layer; ++il) {
    device_attention(model, ds, il, 1, ops::DevicePos(pos, ds.pos));
    device_ffn_dense(model, ds, il, 1);
  }
  return queue_device_output(model, ds, 0, 1, out, false, out_id);
}

}  // namespace

Status device_step(const LlamaModel& model, DeviceSession& ds, const float* x_host, int pos,
                   float* out, int32_t* out_id) {
  ops::Device& dev = ds.dm().device();
  const int kind = out_id ? 1 : 0;
  std::memcpy(ds.h_x, x_host, static_cast<size_t>(model.hparams().n_embd) * sizeof(float));
  ds.h_pos[0] = pos;
  DeviceOutputCopy c;
  if (ds.step_graph[kind] >= 0) {
    c = device_output_copy(model, ds, 1, out, out_id);
    dev.replay(ds.step_graph[kind]);
  } else if (ds.replay && !ds.step_unrecordable[kind]) {
    dev.begin_record();
    c = queue_step(model, ds, pos, out, out_id);
    auto id = dev.end_record();
    if (id.ok()) {
      ds.step_graph[kind] = *id;
    } else {
      ds.step_unrecordable[kind] = true;
      HC_LOG_DEBUG("device step not recorded (every step queued anew): %s",
                   id.status().message().c_str());
      c = queue_step(model, ds, pos, out, out_id);
    }
  } else {
    c = queue_step(model, ds, pos, out, out_id);
  }
  return finish_device_output(ds, c);
}

}  // namespace hc
