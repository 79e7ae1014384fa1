// The decode step of a model wholly on the device, recorded once per session and replayed for
// every later token (ops::Device::begin_record / replay: a CUDA graph, a reused Vulkan command
// buffer, the CPU device's list of operations). "Wholly" (step_on_device): every layer's
// attention on the device and its FFN there too, dense (-ngl past the last layer), or sparse
// with every neuron held and the residual stream kept there (-ngl with the sparse FFN: no host
// half, model/hybrid_forward.h hybrid_host_half; its predictor there too), and the output
// layer. What changes from token to token lives in pinned host buffers the step copies in
// itself: the token's embedding row (DeviceSession::h_x) and its position (h_pos, read by
// RoPE, the KV store and attention from the device's ds.pos). One replay, one sync and the
// 4-byte token id (or the logits) back per token, plus, with predictors, the layers' masks in
// one copy for the statistics.
//
// The step queues exactly the operations the layer-by-layer pass queues for the same token,
// so its results are the same bits; HOTCOLD_DEVICE_REPLAY=0 (read when a device session is
// created) queues every step anew, for comparison. A device that cannot record, or a recording
// that fails (end_record's error), falls back to queueing each step. A sparse FFN's thresholds
// are part of the recording: a session whose thresholds move (dynamic sparsity: a monitor and
// its own thresholds) queues every step.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"

namespace hc {

// Whether a pass of n_tok rows (per_row: independent sequences' steps) with logits wanted from
// row first_out on runs as the recorded step: one token of one sequence, logits wanted, the
// model wholly on the device as above with fixed thresholds (s: the pass's scratch), a session
// with the step's position buffer, and a device that records.
bool device_step_applies(const DeviceSession& ds, const ForwardScratch& s, int64_t n_tok,
                         bool per_row, int64_t first_out, bool want_out);

// The step for the token whose embedding row is x_host [n_embd], at position pos: its logits to
// out [n_vocab], or with out_id only its greedy id to out_id[0] (out untouched). The sparse
// FFN's statistics go to s.sparse_scratch.stats as the layer-by-layer pass counts them.
Status device_step(const LlamaModel& model, ForwardScratch& s, DeviceSession& ds,
                   ThreadPool& pool, const float* x_host, int pos, float* out, int32_t* out_id);

}  // namespace hc
