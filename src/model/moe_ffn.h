// The mixture-of-experts FFN (Mixtral-style llama, qwen3moe), as llama.cpp's build_moe_ffn
// computes it for these architectures:
//   logits = ffn_gate_inp . x                     [n_tok, n_expert]   (x: the normed FFN input)
//   probs  = softmax(logits)                      per token (MoeGating::kSoftmax)
//   chosen = the n_expert_used largest probs, in descending order (ties: lower index first)
//   w      = probs[chosen] / sum(probs[chosen])   (norm_w; the sum clamped below at 2^-14 as
//                                                  llama.cpp does), times w_scale when set
//   y_k    = w_k * down_e . act(gate_e . x, up_e . x)   for e = chosen[k]
//   out    = ((y_0 + y_1) + y_2) + ...            in top-k order, llama.cpp's sum of views
// Prompt batches group tokens by expert, so each expert's weights are read once per batch for
// all the tokens routed to it (llama.cpp's mul_mat_id); each token's k outputs are kept apart
// ("slots", [n_tok * k, n_embd]) and summed in top-k order at the end, so the result does not
// depend on which tokens shared a batch, nor on where each expert ran (the hybrid executor
// fills some slots on a second device and the others on the host: model/hybrid_forward.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/ffn_observer.h"
#include "model/llama_model.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/moe_topk.h"

namespace hc {

// One forward call's routing of n_tok tokens, k = n_expert_used experts each.
struct MoeRouting {
  int64_t n_tok = 0;
  int k = 0;
  std::vector<int32_t> expert;  // [n_tok, k] chosen experts, top-k order
  std::vector<float> weight;    // [n_tok, k] their weights
  // The same routes grouped by expert: routes [offset[e], offset[e + 1]) are expert e's, each
  // the slot t * k + j of a token t that chose e (ascending t).
  std::vector<int32_t> offset;  // [n_expert + 1]
  std::vector<int32_t> route;   // [n_tok * k]
  int64_t n_routes(int e) const { return offset[e + 1] - offset[e]; }
  std::vector<int32_t> order;   // [n_expert] moe_route's scratch
};

// The gate of hp's experts as ops::moe_topk_row (and Device::moe_topk) take it.
ops::MoeGate moe_gate(const LlamaHParams& hp);
// Computes the routing from router logits [n_tok, n_expert] (overwritten with probabilities).
void moe_route(const LlamaHParams& hp, float* logits, int64_t n_tok, MoeRouting* r);

// Watches every MoE layer's routing as it is decided (dynamic placement of experts:
// model/dynamic_sparsity.h), on the forward pass's thread, before the experts run.
class MoeMonitor {
 public:
  virtual ~MoeMonitor() = default;
  virtual void on_routing(int il, const MoeRouting& r) = 0;
};

// Counters of one session's MoE layers: routes (token x chosen expert), those computed on a
// second device; weight bytes read (the router and each expert once per layer call) and experts
// computed (once per layer call), on the host and on the device.
struct MoeStats {
  uint64_t routes = 0, routes_device = 0;
  uint64_t bytes = 0, bytes_device = 0;
  uint64_t expert_calls = 0, expert_calls_device = 0;
  double device_share() const { return routes ? double(routes_device) / double(routes) : 0.0; }
  MoeStats& operator+=(const MoeStats& o) {
    routes += o.routes, routes_device += o.routes_device, bytes += o.bytes;
    bytes_device += o.bytes_device, expert_calls += o.expert_calls;
    expert_calls_device += o.expert_calls_device;
    return *this;
  }
  MoeStats operator-(const MoeStats& o) const {
    MoeStats d = *this;
    d.routes -= o.routes, d.routes_device -= o.routes_device, d.bytes -= o.bytes;
    d.bytes_device -= o.bytes_device, d.expert_calls -= o.expert_calls;
    d.expert_calls_device -= o.expert_calls_device;
    return d;
  }
};

// Buffers of one session's MoE layers (kept between calls: decode allocates nothing).
struct MoeScratch {
  std::vector<float> logits;  // [n_tok, n_expert]
  MoeRouting routing;
  std::vector<float> xe;      // [rows, n_embd] the inputs of one expert's tokens
  std::vector<float> ge, ue;  // [rows, n_ff] gate / up, then h in ge
  std::vector<float> ye;      // [rows, n_embd] one expert's outputs
  std::vector<float> slots;   // [n_tok * k, n_embd] each route's weighted output
  ops::MatmulInput in_x, in_h;  // the expert's gathered inputs, and h for down
  // Hybrid layers: each route's row in the device's outputs, or -1 (computed on the host).
  std::vector<int32_t> row_on_device;
  MoeMonitor* monitor = nullptr;  // sees every routing (null: none)
  MoeStats stats;
};

// Layer il's router over the normed inputs `in` [n_tok, n_embd]: fills sc.routing (and tells
// the observer). A router that is not finite (NaN logits) is a programming error upstream; its
// routing is still well defined (NaN compares false: the lower indices win).
void moe_router(const LlamaModel& model, int il, ops::MatmulInput& in, MoeScratch& sc,
                ThreadPool& pool, FfnObserver* observer);

// Computes expert e of layer il for every route of it in sc.routing: slots[route] =
// weight * expert_e(x[token]), x [n_tok, n_embd] the normed inputs. mode: as the forward pass's
// matmuls (kPerToken keeps every token's arithmetic that of a one-token call).
void moe_expert(const LlamaModel& model, int il, int e, const float* x, MoeScratch& sc,
                ThreadPool& pool, ops::MatmulMode mode, FfnObserver* observer);

// out [n_tok, n_embd] = the sum of each token's k slots in top-k order. A route whose
// sc.row_on_device entry is >= 0 is read from that row of device_rows (a hybrid layer's device
// outputs), the others from sc.slots; device_rows null: every route from sc.slots.
void moe_sum_slots(const MoeScratch& sc, int64_t n_embd, float* out,
                   const float* device_rows = nullptr);

// The whole MoE FFN of layer il on the host: out [n_tok, n_embd] from the normed inputs `in`
// (x's rows, x as in.reset() was given them).
void moe_ffn_layer(const LlamaModel& model, int il, ops::MatmulInput& in, const float* x,
                   float* out, MoeScratch& sc, ThreadPool& pool, FfnObserver* observer);

}  // namespace hc
