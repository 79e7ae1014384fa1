#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/sparse_ffn.h"
#include "ops/cpu/moe_topk.h"
#include "ops/cpu/ops.h"

namespace hc {

namespace {

// Fewest tokens routed to one expert for which its matmuls use the packed GEMM (prompt batches;
// fewer run the decode kernels). Measured on 7B-shaped Q4_0 experts (2 threads): GEMM 1.39x at
// 128 tokens per expert, 1.08x at 64, 0.72x at 32.
constexpr int64_t kExpertGemmMinRows = 48;

void ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

ops::MoeGate moe_gate(const LlamaHParams& hp) {
  ops::MoeGate g;
  g.kind = hp.moe_gating == MoeGating::kSigmoid         ? ops::MoeGate::kSigmoid
           : hp.moe_gating == MoeGating::kSoftmaxWeight ? ops::MoeGate::kSoftmaxWeight
                                                        : ops::MoeGate::kSoftmax;
  g.norm_w = hp.moe_norm_w;
  g.w_scale = hp.moe_w_scale;
  return g;
}

void moe_route(const LlamaHParams& hp, float* logits, int64_t n_tok, MoeRouting* r) {
  const int n_expert = hp.n_expert, k = hp.n_expert_used;
  r->n_tok = n_tok;
  r->k = k;
  r->expert.resize(static_cast<size_t>(n_tok * k));
  r->weight.resize(static_cast<size_t>(n_tok * k));
  r->offset.assign(static_cast<size_t>(n_expert) + 1, 0);
  r->route.resize(static_cast<size_t>(n_tok * k));
  std::vector<int32_t>& order = r->order;
  order.resize(static_cast<size_t>(n_expert));
  const ops::MoeGate gate = moe_gate(hp);
  for (int64_t t = 0; t < n_tok; ++t) {
    int32_t* ex = r->expert.data() + t * k;
    ops::moe_topk_row(logits + t * n_expert, n_expert, k, gate, ex, r->weight.data() + t * k,
                      order.data());
    for (int j = 0; j < k; ++j) ++r->offset[ex[j] + 1];
  }
  for (int e = 0; e < n_expert; ++e) r->offset[e + 1] += r->offset[e];
  std::vector<int32_t>& fill = order;  // now each expert's write position
  for (int e = 0; e < n_expert; ++e) fill[e] = r->offset[e];
  for (int64_t s = 0; s < n_tok * k; ++s) r->route[fill[r->expert[s]]++] = static_cast<int32_t>(s);
}

void moe_router(const LlamaModel& model, int il, ops::MatmulInput& in, MoeScratch& sc,
                ThreadPool& pool, FfnObserver* observer) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_tok = in.n_tok();
  ensure(sc.logits, static_cast<size_t>(n_tok * hp.n_expert));
  ops::matmul(L.ffn_gate_inp, in, sc.logits.data(), pool);
  sc.stats.bytes += rows_bytes(L.ffn_gate_inp, L.ffn_gate_inp.ne1);
  moe_route(hp, sc.logits.data(), n_tok, &sc.routing);
  if (observer) observer->on_moe_routing(il, sc.routing.expert.data(), n_tok, sc.routing.k);
  if (sc.monitor) sc.monitor->on_routing(il, sc.routing);
}

void moe_expert(const LlamaModel& model, int il, int e, const float* x, MoeScratch& sc,
                ThreadPool& pool, ops::MatmulMode mode, FfnObserver* observer) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights::Expert& E = model.weights().layers[static_cast<size_t>(il)].experts[e];
  const MoeRouting& r = sc.routing;
  const int64_t rows = r.n_routes(e), n_embd = hp.n_embd, n_ff = hp.n_ff;
  if (rows == 0) return;
  const int32_t* route = r.route.data() + r.offset[e];
  // The expert's tokens' inputs, contiguous (one token: its row in place).
  const float* xe = x + static_cast<int64_t>(route[0] / r.k) * n_embd;
  if (rows > 1) {
    ensure(sc.xe, static_cast<size_t>(rows * n_embd));
    for (int64_t j = 0; j < rows; ++j)
      std::memcpy(sc.xe.data() + j * n_embd, x + static_cast<int64_t>(route[j] / r.k) * n_embd,
                  static_cast<size_t>(n_embd) * sizeof(float));
    xe = sc.xe.data();
  }
  ensure(sc.ge, static_cast<size_t>(rows * n_ff));
  ensure(sc.ue, static_cast<size_t>(rows * n_ff));
  ensure(sc.ye, static_cast<size_t>(rows * n_embd));
  // An expert's few tokens: the decode layout's kernels (each weight tile streamed once for up
  // to 16 tokens) beat packing GEMM panels for them (docs/BENCHMARKS.md, "Mixture of experts").
  if (rows < kExpertGemmMinRows) mode = ops::MatmulMode::kPerToken;
  sc.in_x.set_mode(mode);
  sc.in_h.set_mode(mode);
  sc.in_x.reset(xe, rows, n_embd);  // gate and up read the same quantised rows
  ops::matmul(E.gate, sc.in_x, sc.ge.data(), pool);
  ops::matmul(E.up, sc.in_x, sc.ue.data(), pool);
  if (observer) {
    std::vector<float>& act = sc.xe;  // the gathered inputs are no longer needed
    ensure(act, static_cast<size_t>(rows * n_ff));
    ffn_activation(hp.ffn_act, sc.ge.data(), act.data(), rows * n_ff);
    observer->on_expert_activation(il, e, act.data(), rows, n_ff);
  }
  gated_activation(hp.ffn_act, sc.ge.data(), sc.ue.data(), rows, n_ff);
  ops::matmul(E.down, sc.ge.data(), rows, sc.ye.data(), pool, sc.in_h);
  for (int64_t j = 0; j < rows; ++j) {  // ggml_mul(experts, weights): one rounding
    const float w = r.weight[route[j]];
    const float* y = sc.ye.data() + j * n_embd;
    float* o = sc.slots.data() + static_cast<int64_t>(route[j]) * n_embd;
    for (int64_t i = 0; i < n_embd; ++i) o[i] = y[i] * w;
  }
  sc.stats.bytes += rows_bytes(E.gate, E.gate.ne1) + rows_bytes(E.up, E.up.ne1) +
                    rows_bytes(E.down, E.down.ne1);
  ++sc.stats.expert_calls;
}

void moe_sum_slots(const MoeScratch& sc, int64_t n_embd, float* out, const float* device_rows) {
  const MoeRouting& r = sc.routing;
  auto slot = [&](int64_t route) {
    const int32_t row = device_rows ? sc.row_on_device[static_cast<size_t>(route)] : -1;
    return row >= 0 ? device_rows + int64_t{row} * n_embd : sc.slots.data() + route * n_embd;
  };
  for (int64_t t = 0; t < r.n_tok; ++t) {
    float* o = out + t * n_embd;
    std::memcpy(o, slot(t * r.k), static_cast<size_t>(n_embd) * sizeof(float));
    for (int j = 1; j < r.k; ++j) ops::add_inplace(o, slot(t * r.k + j), n_embd);
  }
}

void moe_ffn_layer(const LlamaModel& model, int il, ops::MatmulInput& in, const float* x,
                   float* out, MoeScratch& sc, ThreadPool& pool, FfnObserver* observer) {
  const LlamaHParams& hp = model.hparams();
  moe_router(model, il, in, sc, pool, observer);
  ensure(sc.slots, static_cast<size_t>(in.n_tok() * hp.n_expert_used * hp.n_embd));
  for (int e = 0; e < hp.n_expert; ++e) moe_expert(model, il, e, x, sc, pool, in.mode(), observer);
  sc.stats.routes += static_cast<uint64_t>(in.n_tok() * hp.n_expert_used);
  moe_sum_slots(sc, hp.n_embd, out);
}

}  // namespace hc
