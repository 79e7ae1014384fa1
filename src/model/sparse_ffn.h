// Activation-sparse FFN: per layer, which neurons to compute and the weights the sparse
// operators (ops/cpu/sparse.h) read.
//
// A neuron "fires" for a token when its activation a = act(gate . x) (ReLU or SiLU) has
// |a| > threshold[layer]. Exact ReLU uses threshold 0: a skipped neuron's output is exactly
// zero, so the sparse FFN computes the dense FFN's function. SwiGLU models use thresholds
// calibrated from an activation profile (CATS): skipped neurons are those with small |a|, a
// measured accuracy cost for a chosen sparsity.
//
// Decode (and batches whose union firing set is small) then computes, per layer:
//   gate for every neuron (dense, the decode layout) -> the firing set S
//   up over S (sparse_rows), h = act(gate) * up over S (zero where a token's |a| <= threshold)
//   down over S (sparse_down on the transposed down matrix, PowerInfer's ffn_down_t)
// The transposed down matrices are built at load from ffn_down, in anonymous memory: exact for
// F32 / F16 / BF16 (same type); block types are re-quantised to Q8_0 (ops::down_t_type), because
// re-quantising a transposed 4-bit matrix to 4 bits rounds every weight a second time (on the
// tiny test models that moved logits by up to ~30% for Q4_K), while Q8_0 adds under 1% of a
// 4-bit step. The cost: a Q4 down_t row is ~1.9x the bytes, read only for neurons that fire.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "model/ffn_observer.h"
#include "model/llama_model.h"
#include "ops/cpu/matmul.h"
#include "ops/device.h"

namespace hc {

struct SparseOptions {
  // Per-layer thresholds on |act(gate)|; empty = exact ReLU (0 for every layer), which
  // needs a ReLU-family model.
  std::vector<float> thresholds;
  // A batch whose union firing set covers more than this share of the neurons runs the
  // dense FFN (with the same thresholds applied), which is then faster.
  double max_union_share = 0.5;
  // Use the model's activation predictors (blk.N.fc1 / fc2, PowerInfer's layout) to choose
  // the firing set before the FFN runs: gate, up and down then all run over the predicted set
  // only. The predictors read the layer's FFN input before ffn_norm (the residual stream,
  // PowerInfer's ffn_inp), and a neuron is predicted to fire when its logit is at least
  // predictor_thresholds[layer]
  // (empty: the file's hotcold.predictor.thresholds, else its powerinfer.sparse_threshold for
  // every layer). Needs predictors in every layer.
  bool use_predictor = false;
  std::vector<float> predictor_thresholds;
};

class SparseFfn {
 public:
  static Result<std::unique_ptr<const SparseFfn>> build(const LlamaModel& model,
                                                        const SparseOptions& opt);
  ~SparseFfn();

  const TensorView& down_t(int il) const { return down_t_[static_cast<size_t>(il)]; }
  float threshold(int il) const { return thresholds_[static_cast<size_t>(il)]; }
  double max_union_share() const { return max_union_share_; }
  bool use_predictor() const { return use_predictor_; }
  float predictor_threshold(int il) const { return pred_thresholds_[static_cast<size_t>(il)]; }
  // Bytes of transposed down matrices built at load.
  uint64_t built_bytes() const { return built_bytes_; }

 private:
  SparseFfn() = default;
  std::vector<TensorView> down_t_;
  std::vector<float> thresholds_;
  double max_union_share_ = 0.5;
  bool use_predictor_ = false;
  std::vector<float> pred_thresholds_;
  std::vector<std::pair<uint8_t*, size_t>> owned_;  // anonymous mappings
  uint64_t built_bytes_ = 0;
};

// Per-session counters of the sparse FFN (ForwardScratch::sparse_stats).
struct SparseStats {
  uint64_t neurons = 0;        // neurons x tokens x layers seen
  uint64_t fired = 0;          // of which fired (per token)
  uint64_t computed = 0;       // neurons x tokens computed by up / down (union sets included)
  // ReLU family: neurons x tokens computed whose h is not zero (dReLU: gate AND up positive;
  // with a predictor, not its false positives); the sparse down projection reads only the rows
  // of neurons some token of the call has there. Counted by the host's sparse FFN, dense
  // fallback included (0 for SiLU / GELU).
  uint64_t active = 0;
  uint64_t dense_batches = 0;  // layer calls that fell back to the dense FFN
  // Hybrid layers (model/device_model.h): neurons x tokens computed on the second device (all
  // of its held neurons with thresholds; the predicted ones with a predictor). `computed` counts
  // only the host's.
  uint64_t device_computed = 0;
  // Weight bytes the sparse FFN read (each matrix, or each set of its rows, once per layer call,
  // whatever the number of tokens): predictors, gate / up / down rows or whole matrices on a
  // dense fallback, audits included. device_bytes: the second device's hot rows.
  uint64_t bytes = 0;
  uint64_t device_bytes = 0;
  double sparsity() const { return neurons ? 1.0 - double(fired) / double(neurons) : 0.0; }
  // The share of neurons x tokens with a zero h (dReLU: gate or up not positive; meaningful
  // without a predictor, which leaves the unpredicted ones uncounted).
  double active_sparsity() const {
    return neurons ? 1.0 - double(active) / double(neurons) : 0.0;
  }
};

// Watches the sparse FFN's decisions for online statistics and threshold control
// (model/dynamic_sparsity.h). The forward pass asks audit() once per layer call: when true, it
// computes act(gate) of every neuron (also those it would not otherwise: the device's, the
// predictor's skipped ones) and passes them with its firing decision to observe().
class SparseMonitor {
 public:
  virtual ~SparseMonitor() = default;
  virtual bool audit() const = 0;
  // act, fire: [n_tok, n_ff] for layer il (fire: 1 = computed as firing).
  virtual void observe(int il, const float* act, const uint8_t* fire, int64_t n_tok,
                       int64_t n_ff) = 0;
};

// Buffers of one session's sparse FFN (kept between calls: decode allocates nothing).
struct SparseScratch {
  std::vector<int32_t> idx;   // the union firing set, ascending
  std::vector<uint8_t> mark;  // [n_cand] the union: some token fires candidate c
  std::vector<float> act;     // [n_tok, n_ff] act(gate)
  std::vector<uint8_t> fire;  // [n_tok, n_ff] 1 where the token fires the neuron
  std::vector<float> gs, us;  // [n_tok, |S|] gate and up over the set (gs becomes h)
  std::vector<int32_t> iota;  // 0 .. n_ff - 1 (ffn_down_dense)
  std::vector<int32_t> sel;   // candidate positions of the union set (idx[j] = cand[sel[j]])
  std::vector<uint8_t> cfire;  // sparse_ffn_subset: [n_tok, n_cand] firing of the candidates
  std::vector<float> hid, logit;  // predictor: [n_tok, rank], [n_tok, n_ff]
  ops::MatmulInput pred_in;       // predictor: fc2's input
  ops::MatmulInput res_in;        // predictor: fc1's input (the residual before ffn_norm)
  // Decode steps whose tokens take different paths (sparse_ffn.cpp, split_by_path): which
  // token takes the dense fallback, and one batch's inputs, firing, gate, up and outputs.
  std::vector<uint8_t> grp_dense, grp_fire;
  std::vector<int64_t> grp_rows, grp_bounds;  // the batches' tokens (dense first), bounds
  std::vector<float> grp_x, grp_gate, grp_up, grp_out;
  ops::MatmulInput grp_in;
  std::vector<int64_t> row_offsets;  // hybrid decode steps: each row's list of hot neurons
  // A layer whose predictor ran on a device (model/hybrid_forward.h device_predict): fire holds
  // its mask for these tokens, and predict_firing for that layer takes it instead of reading
  // the predictor on the host (once; -1: none).
  int fire_given = -1;
  SparseStats stats;
  // Dynamic sparsity (null: the SparseFfn's fixed values): per-layer thresholds on |act| and
  // on predictor logits that replace SparseFfn::threshold / predictor_threshold, and the
  // monitor that sees the decisions.
  const float* thresholds = nullptr;
  const float* predictor_thresholds = nullptr;
  SparseMonitor* monitor = nullptr;
  float threshold(const SparseFfn& sp, int il) const {
    return thresholds ? thresholds[il] : sp.threshold(il);
  }
  float predictor_threshold(const SparseFfn& sp, int il) const {
    return predictor_thresholds ? predictor_thresholds[il] : sp.predictor_threshold(il);
  }
  std::vector<float> audit_act;     // [n_tok, n_ff] act(gate) of every neuron (audits)
  std::vector<uint8_t> audit_fire;  // [n_tok, n_ff]
  std::vector<float> audit_gate;    // gate scratch of an audit
};

// out = W_down h for n_tok tokens of h [n_tok, n_ff]: the matmul on ffn_down, or, for a
// PowerInfer file that has only ffn_down_t, the sum of every neuron's row of it, h first
// rounded as the matmul would (in place). iota: scratch.
void ffn_down_dense(const LlamaLayerWeights& L, float* h, int64_t n_tok, float* out,
                    ThreadPool& pool, ops::MatmulInput& in, std::vector<int32_t>& iota);

// act[i] = act(gate[i]) for the firing test and observers (scalar SiLU: the products with up
// are rounded as ggml's swiglu by ops::swiglu, not by this; ReLU for ReGLU and dReLU; GELU as
// ggml's table, ops::gelu: for an ungated FFN this is h). act may equal gate.
void ffn_activation(FfnActivation kind, const float* gate, float* act, int64_t n);

// gate [n_tok, n] = the gated activation act(gate) * up (SwiGLU, ReGLU) or relu(gate) *
// relu(up) (dReLU), one row per token as ggml's swiglu vectorises each row (tail per row): the
// dense FFN's and each expert's h.
void gated_activation(FfnActivation kind, float* gate, const float* up, int64_t n_tok,
                      int64_t n);

// The device's GluKind for a model's FFN (an ungated one is ReLU: DeviceModel refuses GELU).
inline ops::GluKind glu_kind(const LlamaHParams& hp) {
  if (!hp.ffn_gated) return ops::GluKind::kReluUngated;
  return hp.ffn_act == FfnActivation::kRelu    ? ops::GluKind::kRelu
         : hp.ffn_act == FfnActivation::kDRelu ? ops::GluKind::kDRelu
                                               : ops::GluKind::kSilu;
}

// Layer il's FFN for the n_tok tokens whose normed inputs `in` holds: out = [n_tok, n_embd].
// residual [n_tok, n_embd]: the same inputs before ffn_norm (what predictors read).
// gate and up are [n_tok, n_ff] scratch. Same function as the dense FFN when every threshold is
// 0 on a ReLU model (up to float summation order).
// observer (may be null) sees act(gate) of every neuron.
void sparse_ffn_layer(const LlamaModel& model, const SparseFfn& sparse, int il,
                      ops::MatmulInput& in, const float* residual, float* gate, float* up,
                      float* out, SparseScratch& sc, ThreadPool& pool, FfnObserver* observer);

// sc.audit_act [n_tok, n_ff] = act(gate) of every neuron of layer il (the dense gate matmul):
// what a SparseMonitor's audit observes where the sparse path skips neurons' gates.
void audit_activations(const LlamaModel& model, int il, ops::MatmulInput& in, SparseScratch& sc,
                       ThreadPool& pool);

// The file's per-layer predictor thresholds: hotcold.predictor.thresholds, else
// powerinfer.sparse_threshold for every layer (what the sparse FFN uses without an override).
std::vector<float> file_predictor_thresholds(const LlamaHParams& hp);

// A predictor's logits, logit [n_tok, n_ff] = fc2 . relu(fc1 . x), for the rows x set in `in`
// (the FFN input before ffn_norm, as PowerInfer's predictors read it). hid: scratch, grown to
// [n_tok, rank]; pred_in: fc2's input scratch. predict_firing's arithmetic, for any fc1 / fc2
// (hotcold profile's predictor audit and hc-synth-model's twin predictors use it too).
void predictor_logits(const TensorView& fc1, const TensorView& fc2, ops::MatmulInput& in,
                      std::vector<float>& hid, float* logit, ops::MatmulInput& pred_in,
                      ThreadPool& pool);

// The predictor's firing decision for every neuron of layer il: sc.fire [n_tok, n_ff] = 1 where
// fc2 . relu(fc1 . x) >= the layer's predictor threshold, x [n_tok, n_embd] the FFN input
// before ffn_norm (residual; quantised into sc.res_in). Needs sparse.use_predictor().
void predict_firing(const LlamaModel& model, const SparseFfn& sparse, int il,
                    const float* residual, int64_t n_tok, SparseScratch& sc, ThreadPool& pool);

// The host half of a hybrid layer: layer il's sparse FFN over the candidate neurons `cand`
// (n_cand ascending indices; the others run on the second device): out [n_tok, n_embd] =
// the sum over candidates that fire. With a predictor, sc.fire must already hold
// predict_firing's decision; with thresholds, gate runs over the candidates only (sparse_rows)
// and each fires when |act(gate)| > threshold. No dense fallback: the candidates are the cold
// neurons, which rarely fire.
void sparse_ffn_subset(const LlamaModel& model, const SparseFfn& sparse, int il,
                       ops::MatmulInput& in, const int32_t* cand, int64_t n_cand, float* out,
                       SparseScratch& sc, ThreadPool& pool);

}  // namespace hc
