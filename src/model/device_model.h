// A model's weights placed on a second device (ops/device.h: a CUDA GPU or the CPU device),
// and the per-session state that goes with them: the executor's half of hybrid inference.
//
// Placement, per layer il:
//   attn[il]      attention runs on the device: attn_norm, wq, wk, wv, wo there, and the
//                 layer's KV cache lives in device memory (DeviceSession).
//   ffn_dense     (-ngl) the whole dense FFN (ffn_norm, gate, up, down) is there too.
//   hot[il]       (sparse FFN) the neurons the device holds (ascending at build; migrate()
//                 then replaces neurons slot by slot): compact gate, up and down_t matrices of
//                 those rows (row j = neuron hot[il][j]); the host computes
//                 the others (cold[il]) from its own weights, concurrently, and the two partial
//                 outputs are added (llama_forward's hybrid FFN).
//   experts[il]   (mixture of experts) the routed experts the device holds, whole (gate, up and
//                 down of each, by slot; migrate_experts() replaces experts slot by slot); the
//                 host runs the router and the other experts, concurrently, and each token's
//                 expert outputs are summed on the host in top-k order
//                 (hybrid_forward.h's hybrid_moe_ffn).
//   predictor     with a predictor-mode sparse FFN, every layer whose attention is on the
//                 device and whose FFN is not dense there also holds its activation
//                 predictor (fc1, fc2): the predictor follows the attention (the planner
//                 counts it so: sparse/planner.h predictor_follows_attn).
//   output        the final norm and output matrix (llama.cpp's -ngl > n_layer).
// -ngl N follows llama.cpp: the last N layers are offloaded, all of them and the output layer
// when N > n_layer. With a sparse FFN an offloaded layer holds all its neurons (hot = all); in a
// mixture-of-experts model all its experts, unless it is one of the first n_cpu_moe layers
// (llama.cpp's --n-cpu-moe: those layers' experts stay on the host).
//
// Every weight is charged to the device's budget; build() fails, naming the tensor and the
// budget, when the placement does not fit.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_view.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/moe_ffn.h"
#include "model/segment_recorder.h"
#include "model/sparse_ffn.h"
#include "ops/device.h"
#include "sparse/migration.h"

namespace hc {

struct DevicePlacement {
  int n_gpu_layers = 0;  // -ngl: the last n layers wholly on the device (and the output, > n_layer)
  // Per layer (empty = none): attention on the device; neurons on the device (ascending, unique).
  std::vector<uint8_t> attn;
  std::vector<std::vector<int32_t>> hot;
  // Mixture of experts: per layer (empty = none) the experts on the device (ascending, unique).
  std::vector<std::vector<int32_t>> experts;
  int n_cpu_moe = 0;  // with -ngl: the first n layers keep their experts on the host
};

// A layer's gate bias (opt's ffn_up.bias, [n_ff] F32) as n_ff rows of one float: what
// DeviceModel uploads and migrates row by row like the hot matrices.
TensorView bias_rows(const LlamaLayerWeights& L);

struct DeviceLayer {
  bool attn = false;
  bool ffn_dense = false;
  TensorView attn_norm, wq, wk, wv, wo;  // device copies (attn)
  TensorView bq, bk, bv, bo;             // their biases (qwen2; may be empty)
  TensorView attn_q_norm, attn_k_norm;   // per-head Q / K norms (qwen3; may be empty)
  TensorView ffn_norm, gate, up, down;   // device copies (ffn_dense)
  std::vector<int32_t> hot;              // neurons on the device, by slot (row of hot_*)
  std::vector<int32_t> cold;             // the others, ascending (the host's candidates)
  std::vector<int32_t> local;            // [n_ff]: position of neuron i in hot, or -1
  TensorView hot_gate, hot_up, hot_down_t;  // [|hot| rows, n_embd] compact (sparse FFN)
  // The hot neurons' gate biases (opt's ffn_up bias) as [|hot| rows, 1] F32, or empty; bias()
  // is what Device::ffn_threshold / ffn_rows take.
  TensorView hot_gate_b;
  const float* bias() const {
    return hot_gate_b.empty() ? nullptr : static_cast<const float*>(hot_gate_b.data);
  }
  bool hybrid() const { return !hot.empty() && !ffn_dense; }
  // The activation predictor (predictor mode, attention on the device, the FFN not dense
  // there): fc1 and fc2 whole, and hot_ids [|hot|] int32, neuron hot[j] in slot j, kept in
  // step with hot by migrate(). The device decides every neuron's firing after its attention
  // and the mask comes back with the host's copy of x (hybrid_forward.h device_predict): no
  // predictor read on the host, no index list sent over.
  TensorView pred_fc1, pred_fc2, hot_ids;
  bool predicts() const { return !pred_fc1.empty(); }
  // Mixture of experts: expert_of[s] is the expert in slot s (its weights exp[s]); slot_of
  // [n_expert] is an expert's slot or -1 (on the host).
  std::vector<int32_t> expert_of, slot_of;
  std::vector<LlamaLayerWeights::Expert> exp;
  bool moe() const { return !expert_of.empty(); }
  // The router (ffn_gate_inp), placed with the attention of a layer of experts.
  TensorView router;
  // All of a layer's experts on the device, as one matrix per kind in the file's order (slot
  // = expert; exp[s] are views of their rows, Device::weight_rows): with the attention (its
  // router and FFN norm) there too, a one-token pass routes on the device, nothing crossing
  // (hybrid_forward.h device_moe_ffn).
  TensorView gate_exps, up_exps, down_exps;
  bool routes() const { return attn && !router.empty() && !gate_exps.empty(); }
};

class DeviceModel {
 public:
  // sparse: the model's sparse FFN (hot neurons need its transposed down matrices), or null;
  // it must outlive the DeviceModel, as must `model`. The DeviceModel shares ownership of dev.
  static Result<std::unique_ptr<DeviceModel>> build(const LlamaModel& model,
                                                    const SparseFfn* sparse,
                                                    std::shared_ptr<ops::Device> dev,
                                                    const DevicePlacement& placement);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  ops::Device& device() const { return *dev_; }
  const LlamaModel& model() const { return *model_; }
  const DeviceLayer& layer(int il) const { return layers_[static_cast<size_t>(il)]; }
  bool output_on_device() const { return !output_.empty(); }
  // Every layer's attention and dense FFN and the output layer here (-ngl past the last layer
  // of a dense model): a decode step needs nothing from the host (model/device_step.h).
  bool whole() const { return whole_; }
  const TensorView& output_norm() const { return output_norm_; }
  const TensorView& output() const { return output_; }
  const float* rope_freqs() const { return rope_freqs_; }  // device copy or null
  const std::vector<int32_t>& neuron_ids() const { return neuron_ids_; }  // 0 .. n_ff - 1
  // Bytes of weights placed (charged to the device).
  uint64_t weight_bytes() const { return weight_bytes_; }
  int n_attn_layers() const;
  int64_t n_hot_neurons() const;
  int64_t n_experts() const;  // routed experts held, over all layers
  // One line for logs: what is where.
  std::string summary() const;

  // Dynamic placement (sparse/migration.h): for each swap, hybrid layer il's slot `slot` gives
  // up neuron `evict` and takes neuron `admit`. The rows' copies are queued on the device (in
  // order: the next forward pass's operations see the new rows, the host never waits for
  // them) and the host's lists (hot, cold, local) switch at once; capacity and device memory
  // are unchanged. Errors (nothing changed): not a hybrid layer, a slot out of range, evict not
  // in that slot, admit already on the device, a neuron out of range.
  // Not thread-safe against a forward pass of any session using this model: call between
  // forward passes (Session does, after eval).
  Status migrate(int il, const std::vector<sparse::Swap>& swaps);
  // The same for a mixture-of-experts layer's experts (a swap's evict / admit are experts):
  // the admitted expert's gate, up and down are copied into the slot. Errors as migrate's (a
  // layer holding no experts).
  Status migrate_experts(int il, const std::vector<sparse::Swap>& swaps);
  uint64_t migrated_experts() const { return migrated_experts_; }
  uint64_t migrated_neurons() const { return migrated_neurons_; }
  uint64_t migrated_bytes() const { return migrated_bytes_; }  // rows copied to the device

 private:
  DeviceModel() = default;
  Status place_layer(int il, bool attn, bool dense_ffn, const std::vector<int32_t>* hot);
  Status place_attention(int il);
  Status place_experts(int il, const std::vector<int32_t>& experts);
  Result<TensorView> put(const TensorView& host, const char* what, const int32_t* rows = nullptr,
                         int64_t n_rows = -1);

  std::shared_ptr<ops::Device> dev_;  // owned with the model's device weights

  const LlamaModel* model_ = nullptr;
  const SparseFfn* sparse_ = nullptr;
  std::vector<DeviceLayer> layers_;
  TensorView output_norm_, output_;
  float* rope_freqs_ = nullptr;
  std::vector<TensorView> owned_;
  uint64_t weight_bytes_ = 0;
  bool whole_ = false;
  uint64_t migrated_neurons_ = 0, migrated_bytes_ = 0, migrated_experts_ = 0;
  std::vector<int32_t> mig_src_, mig_slot_, cold_next_, local_next_;  // migrate()'s buffers
  std::vector<int32_t> iota_;  // 0 .. max(n_ff, n_embd) - 1: an expert's rows (migrate_experts)
  // 0 .. n_ff - 1, never resized: the host rows migrate() copies into hot_ids.
  std::vector<int32_t> neuron_ids_;
};

// One session's device state: the KV cache of the device's attention layers and the
// activation buffers of one micro-batch, on the device, plus pinned host staging buffers.
// All charged to the device's budget, with the device's own operation scratch, reserved here so
// that nothing more is charged once the session runs. A placement with nothing on the device
// allocates nothing.
class DeviceSession {
 public:
  static Result<std::unique_ptr<DeviceSession>> create(const DeviceModel& dm, int n_ctx,
                                                       int64_t max_tokens);
  // Device bytes create() charges on `dev` besides the KV cache: the session's buffers, each
  // rounded as dev.alloc charges it, and the device's own scratch for the largest operations
  // the session queues (ops::Device::scratch_bytes, reserved by create), for a model with some
  // attention layers / dense FFNs / hot neurons / the output layer on the device (planning,
  // -ngl fit). Hot neurons are counted as n_ff in a layer, an upper bound of the FFN scratch.
  // Nothing on the device: 0.
  static uint64_t scratch_bytes(const ops::Device& dev, const LlamaModel& model,
                                int64_t max_tokens, bool attn, bool dense, bool hot, bool output);
  // The same with experts on the device (a mixture-of-experts model; hot then means experts).
  static uint64_t moe_scratch_bytes(const ops::Device& dev, const LlamaModel& model,
                                    int64_t max_tokens, bool attn, bool output);
  // The same for dm's placement exactly: what create(dm, n_ctx, max_tokens) charges on a fresh
  // device besides the KV cache.
  static uint64_t scratch_bytes(const DeviceModel& dm, int64_t max_tokens);
  // Device bytes of one layer's KV cache (K and V) for n_ctx positions, as charged on `dev`.
  static uint64_t kv_layer_bytes(const ops::Device& dev, const LlamaHParams& hp, int n_ctx);
  ~DeviceSession();
  DeviceSession(const DeviceSession&) = delete;
  DeviceSession& operator=(const DeviceSession&) = delete;

  const DeviceModel& dm() const { return *dm_; }
  int n_ctx() const { return n_ctx_; }
  int64_t max_tokens() const { return max_tokens_; }
  fp16_t* k_cache(int il) const { return k_[static_cast<size_t>(il)]; }  // [n_ctx, kv_dim]
  fp16_t* v_cache(int il) const { return v_[static_cast<size_t>(il)]; }  // [kv_dim, n_ctx]
  uint64_t kv_bytes() const { return kv_bytes_; }
  // The KV of this session's device attention layers, positions [0, n), copied into / from the
  // same layers of a host cache of the session's shape (n_ctx, the model's kv_dim), so that the
  // server's prompt store keeps and restores them with the host layers'. Synchronous: call with
  // the device idle (between forward passes). from_host may also overwrite positions from n on,
  // which the next forward pass writes before any attention reads them.
  Status kv_to_host(KvCache& cache, int64_t n) const;
  Status kv_from_host(const KvCache& cache, int64_t n) const;

  // The recorded decode step (model/device_step.h), one per output kind (0 the logits, 1 the
  // greedy id): the device's recording id, -1 none yet; unrecordable once recording it failed.
  // replay is false when HOTCOLD_DEVICE_REPLAY=0 was set at create (every step queued anew).
  int step_graph[2] = {-1, -1};
  bool step_unrecordable[2] = {false, false};
  // What queueing the recorded step added to the sparse FFN's statistics (each replay adds it
  // again) and the layers whose predictor masks it copies back (`deferred` of each replay).
  SparseStats step_stats[2];
  MoeStats step_moe_stats[2];
  std::vector<int> step_deferred;
  bool replay = true;
  // A one-token pass split between host and device, recorded segment by segment
  // (model/segment_recorder.h): made with replay on a device that records. device() is what
  // the forward pass queues on: the recorder while a pass is on, else the device itself.
  // cut() ends the current segment (before the host computes its half of a layer).
  std::unique_ptr<SegmentRecorder> segments;
  ops::Device& device() const {
    if (segments && segments->in_pass()) return *segments;
    return dm().device();
  }
  void cut() const {
    if (segments) segments->cut();
  }

  // Device buffers for max_tokens rows (shapes as ForwardScratch's).
  float *x = nullptr, *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
        *proj = nullptr, *gate = nullptr, *up = nullptr, *logits = nullptr;
  // Greedy decoding's token ids [max_tokens] (Device::argmax of the logits), with the output.
  int32_t* ids = nullptr;
  // A one-token pass's position (one int32, with any attention on the device), copied in from
  // h_pos by the pass itself and read there (ops::DevicePos), so that the pass's operations are
  // the same every token: the recorded step (model/device_step.h) and the recorded segments.
  int32_t* pos = nullptr;
  // A hybrid FFN's host half [max_tokens, n_embd], merged on the device (hybrid_ffn).
  float* cold = nullptr;
  // The device's predictor (DeviceLayer::predicts): fc1's output [max_tokens, max rank], fc2's
  // logits [max_tokens, n_ff], every neuron's mask [max_tokens, n_ff] (bytes, copied back to
  // h_pred_fire), and slots 0 .. n_ff - 1 (int32: ffn_rows over every hot slot with the mask).
  // pred_fire and h_pred_fire hold max(max_tokens, n_layer) rows: a decode step's layers
  // wholly on the device leave theirs at row il (`deferred` lists them, in order) until the
  // pass ends (hybrid_forward.h hybrid_host_half).
  float *pred_hid = nullptr, *pred_logit = nullptr;
  uint8_t* pred_fire = nullptr;
  int32_t* slots = nullptr;
  uint8_t* h_pred_fire = nullptr;
  std::vector<int> deferred;
  // Hot local indices (predictor mode): [n_ff] for a sequence's union list, up to
  // [max_tokens, n_ff] for independent decode steps' own lists, one after the other.
  int32_t* idx = nullptr;
  uint8_t* fire = nullptr;  // [max_tokens, n_ff]
  // Mixture of experts (hybrid_moe_ffn), for up to max_tokens * k routes to the device's
  // experts: each route's token, its output row and its weight, grouped by expert; the
  // gathered inputs of one expert [max_tokens, n_embd] and the routes' weighted outputs
  // [max_tokens * k, n_embd]. gate / up / proj hold one expert's intermediates.
  int32_t *route_tok = nullptr, *route_row = nullptr;
  float *route_w = nullptr, *xe = nullptr, *routes_out = nullptr;
  // A layer routed on the device (device_moe_ffn): its router logits [max_tokens, n_expert];
  // the routes' experts and weights go to route_tok / route_w, their outputs to routes_out.
  float* moe_logits = nullptr;
  // Pinned host staging.
  float *h_x = nullptr, *h_out = nullptr, *h_logits = nullptr;
  int32_t *h_idx = nullptr, *h_ids = nullptr, *h_pos = nullptr;
  uint8_t* h_fire = nullptr;
  int32_t *h_route_tok = nullptr, *h_route_row = nullptr;
  float *h_route_w = nullptr, *h_routes_out = nullptr;

 private:
  DeviceSession() = default;
  Result<void*> dev_alloc(uint64_t bytes, const char* what);
  Result<void*> host_alloc(uint64_t bytes);

  const DeviceModel* dm_ = nullptr;
  int n_ctx_ = 0;
  int64_t max_tokens_ = 0;
  std::vector<fp16_t*> k_, v_;
  uint64_t kv_bytes_ = 0;
  std::vector<void*> dev_blocks_, host_blocks_;
};

}  // namespace hc
