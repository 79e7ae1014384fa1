// The forward pass's device half (internal to model/: llama_forward calls these for layers a
// DeviceModel places on a second device). One sequence at a time; the residual stream x is on
// the host or on the device, moved only when the next step needs it elsewhere, so consecutive
// offloaded layers keep it on the device and only n_embd-sized vectors cross the link.
#pragma once
#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/matmul.h"

namespace hc {

struct ForwardScratch;

// Where one micro-batch's residual stream is.
struct DeviceResidual {
  DeviceSession* ds = nullptr;
  bool on_device = false;
  // Makes the device copy current (queues the copy).
  void to_device(const float* x_host, int64_t n);
  // Makes the host copy current (waits for the device).
  Status to_host(float* x_host, int64_t n);
  // Copies the device's x to x_host (waits for the device); the device copy stays the current
  // one, so the next step there needs no copy back.
  Status read(float* x_host, int64_t n);
};

// `per_row` / `steps` below: the rows are independent sequences' decode steps (the server's
// batched decode), and every row gets exactly the device operations its one-token decode
// queues (Device::matmul_rows, ffn_threshold_rows, one attention call per step over its own
// session's cache, one ffn_rows call per row over its own list), so the batch changes no bit.
// ds then carries the batch's activations; each step's KV is in steps[t].device.

// Layer il's attention block on the device for n_tok rows (x on device): at positions pos0.. of
// ds's cache (a host integer, or the device's ds.pos in a recorded step), or, with steps
// (n_tok of them), each row at its step's position and session.
void device_attention(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                      ops::DevicePos pos0, std::span<const SeqStep> steps = {});
// Layer il's dense FFN block on the device (x on device).
void device_ffn_dense(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                      bool per_row = false);
// Layer il's hybrid FFN: the device's hot neurons and the host's cold neurons on the same
// tokens at once, their partial outputs added into x. s.xb / s.in hold the normed input.
// x on the host: the normed input goes to the device, the device's half comes back, the
// host adds both (one sync). x_on_device (the caller read x with DeviceResidual::read, and
// can_merge_on_device says yes): the device norms its own input from its x, the host's half
// goes over once and the device adds both halves into its x: no sync here, the stream stays.
Status hybrid_ffn(const LlamaModel& model, const SparseFfn& sparse, DeviceSession& ds, int il,
                  ForwardScratch& s, ThreadPool& pool, int64_t n_tok, bool per_row = false,
                  bool x_on_device = false);
// Layer il's predictor on the device (DeviceLayer::predicts, after the device's attention: x
// there): fc2 . relu(fc1 . x) against `threshold`, the hot slots' mask left in ds.fire for
// hybrid_ffn; with mask_back also every neuron's mask queued back to ds.h_pred_fire, which
// arrives with the caller's next sync (the one that brings x): take_device_prediction then
// puts it in sc.fire for the host's neurons, as predict_firing would have.
void device_predict(const LlamaModel& model, DeviceSession& ds, int il, int64_t n_tok,
                    bool per_row, float threshold, bool mask_back);
void take_device_prediction(const LlamaModel& model, const DeviceSession& ds, int il,
                            int64_t n_tok, SparseScratch& sc);
// Whether a hybrid layer's FFN has a host half: not when x stays on the device (resident),
// the host holds none of its neurons, no audit wants every neuron's act (-ngl with the
// sparse FFN) and, with a predictor, the pass is one decode step: the layer then runs wholly
// on the device, with no sync and no copy in it. Its predictor's mask waits in the layer's
// slot of ds.pred_fire (ds.deferred) until the pass ends: queue_deferred_masks queues one copy
// of every slot before the pass's last sync, take_deferred_masks counts them after it.
bool hybrid_host_half(const DeviceLayer& d, const SparseScratch& sc, bool resident,
                      int64_t n_tok);
void queue_deferred_masks(const LlamaModel& model, DeviceSession& ds);
void take_deferred_masks(const LlamaModel& model, DeviceSession& ds, SparseScratch& sc);
// Whether layer il's hybrid FFN can run with x on the device: the device holds its input norm
// (placed with the attention), an RMSNorm, and the FFN's output is the two halves' sum alone
// (no down bias, no parallel attention to add).
bool can_merge_on_device(const LlamaModel& model, const DeviceLayer& d, int il);
// The model's part of that (the input norm is placed with the attention): what the planner
// counts as one shared round trip for a layer with attention and hot neurons on the device.
bool merges_on_device(const LlamaModel& model, int il);
// Layer il's mixture-of-experts FFN with some experts on the device (x on host): the host
// routes, the device computes its experts' routes while the host computes the others, and the
// host sums each token's outputs in top-k order into x. s.xb / s.in hold the normed input.
Status hybrid_moe_ffn(const LlamaModel& model, DeviceSession& ds, int il, ForwardScratch& s,
                      ThreadPool& pool, int64_t n_tok, bool per_row = false);
// Whether layer il's experts run routed on the device in this pass (DeviceLayer::routes): one
// token of one sequence, x on the device, nobody watching the routing (a monitor for expert
// migration, an observer).
bool routes_on_device(const DeviceLayer& d, const ForwardScratch& s, int64_t n_tok, bool per_row,
                      bool x_on_device);
// Layer il's mixture-of-experts FFN for one token wholly on the device (routes_on_device): the
// norm, the router, the top k (Device::moe_topk), the chosen experts' gate, up and down
// (Device::matmul_id over the layer's stacked experts), their weighted sum in top-k order
// (moe_combine) added into x there; no sync, nothing crosses. The host's bits on the CPU
// device. The counters it adds go to sc.stats (every route on the device).
void device_moe_ffn(const LlamaModel& model, DeviceSession& ds, int il, MoeScratch& sc);
// Final norm and output matrix on the device for rows [first, n_tok) (x on device): logits
// [n_tok - first, n_vocab] copied to out; or, with out_id, only each row's greedy token
// (Device::argmax) copied to out_id [n_tok - first], out untouched: 4 bytes a row cross.
Status device_output(const LlamaModel& model, DeviceSession& ds, int64_t first, int64_t n_tok,
                     float* out, bool per_row = false, int32_t* out_id = nullptr);
// What device_output brings back: `bytes` from the pinned `staged` to `dst` after the sync.
struct DeviceOutputCopy {
  void* staged;
  void* dst;
  uint64_t bytes;
};
// Where n_out rows of device_output come back through (the logits, or with out_id the ids).
DeviceOutputCopy device_output_copy(const LlamaModel& model, const DeviceSession& ds,
                                    int64_t n_out, float* out, int32_t* out_id);
// device_output's queued half: the operations and the copy back, no sync.
DeviceOutputCopy queue_device_output(const LlamaModel& model, DeviceSession& ds, int64_t first,
                                     int64_t n_tok, float* out, bool per_row, int32_t* out_id);
// Its other half: waits for the device and copies what came back to its destination.
Status finish_device_output(DeviceSession& ds, const DeviceOutputCopy& c);

}  // namespace hc
