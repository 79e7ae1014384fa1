#include "model/sparse_ffn.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include "ops/cpu/ops.h"
#include "ops/cpu/sparse.h"
#include "quant/quant.h"

namespace hc {

SparseFfn::~SparseFfn() {
  for (auto& [p, n] : owned_) munmap(p, n);
}

Result<std::unique_ptr<const SparseFfn>> SparseFfn::build(const LlamaModel& model,
                                                          const SparseOptions& opt) {
  const LlamaHParams& hp = model.hparams();
  if (hp.is_moe())
    return Status::Error("sparse FFN: this " + hp.arch + " model routes each token to " +
                         std::to_string(hp.n_expert_used) + " of " + std::to_string(hp.n_expert) +
                         " experts already (sparsity at the grain of experts); --sparse, "
                         "--sparsity and --predictor run dense FFNs neuron by neuron: drop them "
                         "(place hot experts with --vram-budget instead)");
  if (opt.use_predictor) {
    for (int il = 0; il < hp.n_layer; ++il)
      if (model.weights().layers[il].fc1.empty())
        return Status::Error("sparse FFN: --predictor needs activation predictors in every layer "
                             "(blk.N.fc1.weight / blk.N.fc2.weight), layer " + std::to_string(il) +
                             " has none (train them with hotcold train-predictor)");
    if (hp.predictor_normed_input)
      return Status::Error(
          "sparse FFN: this file's predictors were trained by an older hotcold on the normed FFN "
          "input (hotcold.predictor.thresholds without hotcold.predictor.input = 'residual'); "
          "predictors now read the FFN input before ffn_norm, as PowerInfer's do: train them "
          "again with hotcold train-predictor");
    if (!opt.predictor_thresholds.empty() &&
        static_cast<int>(opt.predictor_thresholds.size()) != hp.n_layer)
      return Status::Error("sparse FFN: expected " + std::to_string(hp.n_layer) +
                           " per-layer predictor thresholds, found " +
                           std::to_string(opt.predictor_thresholds.size()));
  } else if (opt.thresholds.empty() && !relu_family(hp.ffn_act))
    return Status::Error(
        std::string("exact-ReLU sparsity needs a ReLU-family model, but this model's FFN uses ") +
        (hp.ffn_act == FfnActivation::kGelu ? "GELU" : "SiLU") + ": give "
        "per-layer thresholds (e.g. --sparsity 0.5 with --stats STATS.gguf from hotcold profile)");
  if (!opt.thresholds.empty() && static_cast<int>(opt.thresholds.size()) != hp.n_layer)
    return Status::Error("sparse FFN: expected " + std::to_string(hp.n_layer) +
                         " per-layer thresholds, found " + std::to_string(opt.thresholds.size()));
  if (!(opt.max_union_share >= 0.0 && opt.max_union_share <= 1.0))
    return Status::Error("sparse FFN: max_union_share must be in [0, 1]");
  std::unique_ptr<SparseFfn> s(new SparseFfn());
  s->thresholds_ = opt.thresholds.empty() ? std::vector<float>(hp.n_layer, 0.0f) : opt.thresholds;
  s->max_union_share_ = opt.max_union_share;
  s->use_predictor_ = opt.use_predictor;
  s->pred_thresholds_ = !opt.predictor_thresholds.empty() ? opt.predictor_thresholds
                                                           : file_predictor_thresholds(hp);
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model.weights().layers[il];
    if (!L.ffn_down_t.empty()) {  // PowerInfer's file layout: already transposed
      s->down_t_.push_back(L.ffn_down_t);
      continue;
    }
    const TensorView& down = L.ffn_down;  // [n_embd rows, n_ff]
    const GgmlType tt = ops::down_t_type(down.type);
    const size_t bytes = static_cast<size_t>(ops::transpose_bytes(tt, down));
    if (down.ne1 % dtype_traits(tt).block_size != 0)
      return Status::Error("sparse FFN: layer " + std::to_string(il) + ": n_embd " +
                           std::to_string(down.ne1) + " is not a multiple of the " +
                           dtype_name(tt) + " block size; cannot transpose ffn_down");
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
      return Status::Error("sparse FFN: cannot map " + std::to_string(bytes) +
                           " bytes for a transposed down matrix: " + std::strerror(errno));
    madvise(mem, bytes, MADV_HUGEPAGE);  // a firing set's rows are scattered: fewer TLB misses
    auto* dst = static_cast<uint8_t*>(mem);
    s->owned_.emplace_back(dst, bytes);
    TensorView src = down;
    src.packed = nullptr;  // transpose reads the file layout (the original is never repacked
                           // when a sparse FFN is wanted: LoadOptions::sparse_ffn)
    ops::transpose_weights(src, tt, dst);
    s->down_t_.push_back(TensorView::make(tt, dst, down.ne1, down.ne0));
    s->built_bytes_ += bytes;
  }
  return std::unique_ptr<const SparseFfn>(std::move(s));
}

namespace {

uint64_t all_bytes(const TensorView& t) { return rows_bytes(t, t.ne1); }

// opt's ffn_up bias on the gate values of neurons idx [n_idx] (null: every neuron, n_idx of
// them) for n_tok tokens: y [n_tok, n_idx] += b[idx[j]], before the activation.
void add_gate_bias(const LlamaLayerWeights& L, float* y, const int32_t* idx, int64_t n_idx,
                   int64_t n_tok) {
  if (L.ffn_gate_b.empty()) return;
  const auto* b = static_cast<const float*>(L.ffn_gate_b.data);
  for (int64_t t = 0; t < n_tok; ++t) {
    float* yt = y + t * n_idx;
    for (int64_t j = 0; j < n_idx; ++j) yt[j] += b[idx ? idx[j] : j];
  }
}

// g = h = act(g) * u in place (ungated FFN: act(g); u unused), over a set of neurons: SwiGLU
// per element (ops::swiglu_each), since a set's length and order vary from call to call and a
// neuron's h must not depend on where it falls.
void apply_act(const LlamaHParams& hp, float* g, const float* u, int64_t n) {
  if (!hp.ffn_gated) ffn_activation(hp.ffn_act, g, g, n);
  else if (hp.ffn_act == FfnActivation::kSilu) ops::swiglu_each(g, u, n);
  else gated_activation(hp.ffn_act, g, u, 1, n);
}

// h [n_tok, n] (every neuron of a layer, in order) as the down projection's dot product reads
// it in ggml: converted to vec_dot_type(down_t) and back. F16 / BF16 round each value; the Q8
// types quantise blocks of consecutive neurons (32, or 256 for Q8_K; a partial last block is
// padded with zeros), as ggml's matmul does to h and PowerInfer's sparse down projection too
// (ggml_compute_forward_mul_mat_axpy converts h with from_float of the dot type). F32: as is.
// The sparse path rounds only value by value (ops::round_h_by_value): a block spanning the
// halves of a hybrid layer cannot be quantised by either half.
void round_h_row(GgmlType down_t, float* h, int64_t n_tok, int64_t n) {
  if (ops::round_h_by_value(down_t, h, n_tok * n)) return;
  const GgmlType vt = quant::vec_dot_type(down_t);
  if (vt == GgmlType::F32) return;
  const int64_t unit = dtype_traits(vt).block_size, padded = (n + unit - 1) / unit * unit;
  thread_local std::vector<float> row;
  thread_local std::vector<uint8_t> q;
  row.assign(static_cast<size_t>(padded), 0.0f);
  q.resize(static_cast<size_t>(row_bytes(vt, padded)));
  for (int64_t t = 0; t < n_tok; ++t) {
    std::copy(h + t * n, h + (t + 1) * n, row.begin());
    quant::quantize_activations(vt, row.data(), q.data(), padded);
    quant::dequantize_row(vt, q.data(), row.data(), padded);
    std::copy(row.begin(), row.begin() + n, h + t * n);
  }
}

// With sc.gs [n_tok, |sc.idx|] holding gate over the set sc.idx: up over the set,
// h = act(gate) * up with each token's h zeroed where fired(t, j) is false, then the down
// projection over the set into out [n_tok, n_embd].
template <class Fired>
void up_act_down(const LlamaModel& model, const SparseFfn& sparse, int il, ops::MatmulInput& in,
                 Fired fired, float* out, SparseScratch& sc, ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_tok = in.n_tok(), n_idx = static_cast<int64_t>(sc.idx.size());
  if (hp.ffn_gated) {
    ops::sparse_rows(L.ffn_up, in, sc.idx.data(), n_idx, sc.us.data(), pool);
    sc.stats.bytes += rows_bytes(L.ffn_up, n_idx);
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    float* h = sc.gs.data() + t * n_idx;
    apply_act(hp, h, sc.us.data() + t * n_idx, n_idx);
    for (int64_t j = 0; j < n_idx; ++j)  // a neuron of the union that this token did not fire
      if (!fired(t, j)) h[j] = 0.0f;
  }
  ops::round_h_by_value(sparse.down_t(il).type, sc.gs.data(), n_tok * n_idx);  // see round_h_row
  int64_t n_down = n_idx;
  if (relu_family(hp.ffn_act)) {
    // The down projection reads only the neurons some token has a non-zero h for (a zero h adds
    // nothing: the same sum, fewer rows read), as PowerInfer's axpy skips h == 0. dReLU zeroes h
    // where up <= 0; every ReLU kind where a predictor chose a neuron whose gate is not
    // positive (its false positives).
    sc.mark.assign(static_cast<size_t>(n_idx), 0);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_idx; ++j) {
        const bool on = sc.gs[t * n_idx + j] != 0.0f;
        sc.mark[j] |= on;
        sc.stats.active += on;
      }
    // Compact only when some row is all zero (thresholded ReGLU: never, no copy then).
    const bool all_on = std::find(sc.mark.begin(), sc.mark.end(), uint8_t{0}) == sc.mark.end();
    n_down = all_on ? n_idx : 0;
    for (int64_t j = 0; j < n_idx && !all_on; ++j) {
      if (!sc.mark[j]) continue;
      sc.idx[n_down] = sc.idx[j];
      for (int64_t t = 0; t < n_tok; ++t) sc.gs[t * n_idx + n_down] = sc.gs[t * n_idx + j];
      ++n_down;
    }
    // Rows are now n_down apart: pack each token's h to that stride (token 0 is in place).
    for (int64_t t = 1; t < n_tok && !all_on; ++t)
      std::memmove(sc.gs.data() + t * n_down, sc.gs.data() + t * n_idx,
                   static_cast<size_t>(n_down) * sizeof(float));
    sc.idx.resize(static_cast<size_t>(n_down));
  }
  sc.stats.bytes += rows_bytes(sparse.down_t(il), n_down);
  ops::sparse_down(sparse.down_t(il), sc.idx.data(), n_down, sc.gs.data(), n_tok, out, pool);
}

void ffn_over_candidates(const LlamaModel& model, const SparseFfn& sparse, int il,
                         ops::MatmulInput& in, const int32_t* cand, int64_t n_cand,
                         const uint8_t* cfire, const float* gate_vals, float* dense_gate,
                         float* dense_up, float* out, SparseScratch& sc, ThreadPool& pool);

// Decode steps whose tokens take different paths (sc.grp_dense: 1 = the dense fallback): the
// dense tokens as one batch, then the sparse ones, as one batch when `sparse_batched` (their
// union is within max_union_share) or else one by one (a large union computed sparse costs
// more than each token's own set). Each batch is gathered (inputs, firing, gate values when
// computed) and its outputs scattered back; within one, ffn_over_candidates takes the path its
// tokens take alone and does not split it again.
void split_by_path(const LlamaModel& model, const SparseFfn& sparse, int il,
                   ops::MatmulInput& in, const int32_t* cand, int64_t n_cand,
                   const uint8_t* cfire, const float* gate_vals, bool sparse_batched, float* out,
                   SparseScratch& sc, ThreadPool& pool) {
  const int64_t n_tok = in.n_tok(), ne0 = in.ne0(), n_embd = model.hparams().n_embd;
  // Every batch's rows first (the inner calls reuse sc.grp_dense): the dense tokens, then the
  // sparse ones; bounds[k] .. bounds[k + 1] are batch k's.
  std::vector<int64_t>& rows = sc.grp_rows;
  std::vector<int64_t>& bounds = sc.grp_bounds;
  rows.clear();
  bounds.assign(1, 0);
  for (uint8_t path : {uint8_t{1}, uint8_t{0}}) {
    for (int64_t t = 0; t < n_tok; ++t) {
      if (sc.grp_dense[t] != path) continue;
      rows.push_back(t);
      if (path == 0 && !sparse_batched) bounds.push_back(static_cast<int64_t>(rows.size()));
    }
    if (bounds.back() != static_cast<int64_t>(rows.size()))
      bounds.push_back(static_cast<int64_t>(rows.size()));
  }
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const int64_t* grp = rows.data() + bounds[k];
    const int64_t g = bounds[k + 1] - bounds[k];
    sc.grp_x.resize(static_cast<size_t>(g * ne0));
    sc.grp_fire.resize(static_cast<size_t>(g * n_cand));
    sc.grp_gate.resize(static_cast<size_t>(g * n_cand));
    sc.grp_up.resize(static_cast<size_t>(g * n_cand));
    sc.grp_out.resize(static_cast<size_t>(g * n_embd));
    for (int64_t r = 0; r < g; ++r) {
      const int64_t t = grp[r];
      std::copy_n(in.x() + t * ne0, ne0, sc.grp_x.data() + r * ne0);
      std::copy_n(cfire + t * n_cand, n_cand, sc.grp_fire.data() + r * n_cand);
      if (gate_vals) std::copy_n(gate_vals + t * n_cand, n_cand, sc.grp_gate.data() + r * n_cand);
    }
    sc.grp_in.set_mode(ops::MatmulMode::kPerToken);
    sc.grp_in.reset(sc.grp_x.data(), g, ne0);
    ffn_over_candidates(model, sparse, il, sc.grp_in, cand, n_cand, sc.grp_fire.data(),
                        gate_vals ? sc.grp_gate.data() : nullptr, sc.grp_gate.data(),
                        sc.grp_up.data(), sc.grp_out.data(), sc, pool);
    for (int64_t r = 0; r < g; ++r)
      std::copy_n(sc.grp_out.data() + r * n_embd, n_embd, out + grp[r] * n_embd);
  }
}

// Layer il's FFN over candidate neurons whose firing is known: cfire [n_tok, n_cand] says
// whether token t fires candidate c, the neuron cand[c] (cand null: every neuron, c = i).
// gate_vals [n_tok, n_cand] is gate over the candidates when already computed, else null (gate
// then runs over the fired set only). The union over tokens is the set; each token's h is
// zeroed outside its own set. dense_gate (the whole-layer case only, cand null): a set larger
// than max_union_share runs the dense FFN masked instead, gate in dense_gate ([n_tok, n_ff],
// already computed when gate_vals == dense_gate) and up in dense_up.
void ffn_over_candidates(const LlamaModel& model, const SparseFfn& sparse, int il,
                         ops::MatmulInput& in, const int32_t* cand, int64_t n_cand,
                         const uint8_t* cfire, const float* gate_vals, float* dense_gate,
                         float* dense_up, float* out, SparseScratch& sc, ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_tok = in.n_tok();
  // Decode steps of independent sequences (kPerToken): each token takes the path it would take
  // alone, the dense FFN when its own set is larger than max_union_share, so that what else is
  // in the batch changes no bit. Both paths are per token (the union's extra neurons have h = 0
  // for a token, and the fma of a zero adds nothing), so the batch runs as is when all its
  // tokens are dense, or all sparse with a union within the share (the union rule below then
  // agrees); otherwise it is split (split_by_path).
  if (dense_gate && n_tok > 1 && in.mode() == ops::MatmulMode::kPerToken) {
    const double limit = sparse.max_union_share() * static_cast<double>(n_cand);
    sc.grp_dense.assign(static_cast<size_t>(n_tok), 0);
    sc.mark.assign(static_cast<size_t>(n_cand), 0);  // the sparse tokens' union
    int64_t n_dense = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
      const uint8_t* f = cfire + t * n_cand;
      const int64_t n_fired = std::count(f, f + n_cand, uint8_t{1});
      sc.grp_dense[t] = n_fired > limit;
      n_dense += sc.grp_dense[t];
      if (!sc.grp_dense[t])
        for (int64_t c = 0; c < n_cand; ++c) sc.mark[c] |= f[c];
    }
    const bool sparse_batched =
        std::count(sc.mark.begin(), sc.mark.end(), uint8_t{1}) <= limit;
    if (n_dense != n_tok && !(n_dense == 0 && sparse_batched)) {
      split_by_path(model, sparse, il, in, cand, n_cand, cfire, gate_vals, sparse_batched, out,
                    sc, pool);
      return;
    }
  }
  // The union, token rows outer (each row of cfire is read once, contiguously).
  sc.mark.assign(static_cast<size_t>(n_cand), 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t c = 0; c < n_cand; ++c) {
      sc.mark[c] |= cfire[t * n_cand + c];
      sc.stats.fired += cfire[t * n_cand + c];
    }
  }
  sc.idx.clear();  // neuron indices of the set
  sc.sel.clear();  // their candidate positions
  for (int64_t c = 0; c < n_cand; ++c)
    if (sc.mark[c]) {
      sc.idx.push_back(cand ? cand[c] : static_cast<int32_t>(c));
      sc.sel.push_back(static_cast<int32_t>(c));
    }
  const int64_t n_idx = static_cast<int64_t>(sc.idx.size());
  if (dense_gate && n_idx > sparse.max_union_share() * static_cast<double>(n_cand)) {
    // Dense is faster for a set this large: every neuron, the skipped ones zeroed.
    if (gate_vals != dense_gate) {
      ops::matmul(L.ffn_gate, in, dense_gate, pool);
      add_gate_bias(L, dense_gate, nullptr, n_cand, n_tok);
      sc.stats.bytes += all_bytes(L.ffn_gate);
    }
    if (hp.ffn_gated) ops::matmul(L.ffn_up, in, dense_up, pool);
    sc.stats.bytes += all_bytes(L.ffn_up) + all_bytes(L.ffn_down.empty() ? L.ffn_down_t : L.ffn_down);
    for (int64_t t = 0; t < n_tok; ++t) {
      float* g = dense_gate + t * n_cand;
      apply_act(hp, g, dense_up + t * n_cand, n_cand);
      for (int64_t i = 0; i < n_cand; ++i)
        if (!cfire[t * n_cand + i]) g[i] = 0.0f;
      if (relu_family(hp.ffn_act))  // counted as on the sparse path (SparseStats::active)
        for (int64_t i = 0; i < n_cand; ++i) sc.stats.active += g[i] != 0.0f;
    }
    ffn_down_dense(L, dense_gate, n_tok, out, pool, in, sc.iota);
    sc.stats.computed += static_cast<uint64_t>(n_tok * n_cand);
    sc.stats.dense_batches += 1;
    return;
  }
  sc.stats.computed += static_cast<uint64_t>(n_tok * n_idx);
  if (n_idx == 0) {
    std::fill(out, out + n_tok * hp.n_embd, 0.0f);
    return;
  }
  if (sc.gs.size() < static_cast<size_t>(n_tok * n_idx)) {
    sc.gs.resize(n_tok * n_idx);
    sc.us.resize(n_tok * n_idx);
  }
  if (gate_vals) {
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_idx; ++j)
        sc.gs[t * n_idx + j] = gate_vals[t * n_cand + sc.sel[j]];
  } else {
    ops::sparse_rows(L.ffn_gate, in, sc.idx.data(), n_idx, sc.gs.data(), pool);
    add_gate_bias(L, sc.gs.data(), sc.idx.data(), n_idx, n_tok);
    sc.stats.bytes += rows_bytes(L.ffn_gate, n_idx);
  }
  up_act_down(model, sparse, il, in,
              [&](int64_t t, int64_t j) { return cfire[t * n_cand + sc.sel[j]] != 0; }, out, sc,
              pool);
}

}  // namespace

void ffn_down_dense(const LlamaLayerWeights& L, float* h, int64_t n_tok, float* out,
                    ThreadPool& pool, ops::MatmulInput& in, std::vector<int32_t>& iota) {
  if (!L.ffn_down.empty()) {
    ops::matmul(L.ffn_down, h, n_tok, out, pool, in);
    return;
  }
  const int64_t n_ff = L.ffn_down_t.ne1;
  if (static_cast<int64_t>(iota.size()) != n_ff) {
    iota.resize(static_cast<size_t>(n_ff));
    for (int64_t i = 0; i < n_ff; ++i) iota[i] = static_cast<int32_t>(i);
  }
  round_h_row(L.ffn_down_t.type, h, n_tok, n_ff);  // as the matmul on ffn_down would read h
  ops::sparse_down(L.ffn_down_t, iota.data(), n_ff, h, n_tok, out, pool);
}

void audit_activations(const LlamaModel& model, int il, ops::MatmulInput& in, SparseScratch& sc,
                       ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const int64_t n = in.n_tok() * hp.n_ff;
  if (sc.audit_gate.size() < static_cast<size_t>(n)) sc.audit_gate.resize(n);
  if (sc.audit_act.size() < static_cast<size_t>(n)) sc.audit_act.resize(n);
  const TensorView& gate = model.weights().layers[static_cast<size_t>(il)].ffn_gate;
  ops::matmul(gate, in, sc.audit_gate.data(), pool);
  add_gate_bias(model.weights().layers[static_cast<size_t>(il)], sc.audit_gate.data(), nullptr,
                hp.n_ff, in.n_tok());
  sc.stats.bytes += all_bytes(gate);
  ffn_activation(hp.ffn_act, sc.audit_gate.data(), sc.audit_act.data(), n);
}

void gated_activation(FfnActivation kind, float* gate, const float* up, int64_t n_tok,
                      int64_t n) {
  for (int64_t t = 0; t < n_tok; ++t) {
    float* g = gate + t * n;
    const float* u = up + t * n;
    if (kind == FfnActivation::kRelu) ops::reglu(g, u, n);
    else if (kind == FfnActivation::kDRelu) ops::dreglu(g, u, n);
    else ops::swiglu(g, u, n);
  }
}

void ffn_activation(FfnActivation kind, const float* gate, float* act, int64_t n) {
  if (relu_family(kind)) {
    for (int64_t i = 0; i < n; ++i) act[i] = gate[i] > 0.0f ? gate[i] : 0.0f;
  } else if (kind == FfnActivation::kGelu) {
    if (act != gate) std::copy(gate, gate + n, act);
    ops::gelu(act, n);  // ggml's table: the ungated FFN's h itself
  } else {
    for (int64_t i = 0; i < n; ++i) act[i] = gate[i] / (1.0f + std::exp(-gate[i]));
  }
}

void sparse_ffn_layer(const LlamaModel& model, const SparseFfn& sparse, int il,
                      ops::MatmulInput& in, const float* residual, float* gate, float* up,
                      float* out, SparseScratch& sc, ThreadPool& pool, FfnObserver* observer) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_ff = hp.n_ff, n_tok = in.n_tok();
  if (sc.fire.size() < static_cast<size_t>(n_tok * n_ff)) sc.fire.resize(n_tok * n_ff);
  if (sparse.use_predictor()) {
    predict_firing(model, sparse, il, residual, n_tok, sc, pool);
    sc.stats.neurons += static_cast<uint64_t>(n_tok * n_ff);
    if (sc.monitor && sc.monitor->audit()) {  // every neuron's act, to score the predictor
      audit_activations(model, il, in, sc, pool);
      sc.monitor->observe(il, sc.audit_act.data(), sc.fire.data(), n_tok, n_ff);
    }
    ffn_over_candidates(model, sparse, il, in, nullptr, n_ff, sc.fire.data(), nullptr, gate, up,
                        out, sc, pool);
    return;
  }
  // Thresholds: every neuron's gate, then |act(gate)| > threshold (0 for exact ReLU).
  const float tau = sc.threshold(sparse, il);
  ops::matmul(L.ffn_gate, in, gate, pool);
  add_gate_bias(L, gate, nullptr, n_ff, n_tok);
  sc.stats.bytes += all_bytes(L.ffn_gate);
  if (sc.act.size() < static_cast<size_t>(n_tok * n_ff)) sc.act.resize(n_tok * n_ff);
  ffn_activation(hp.ffn_act, gate, sc.act.data(), n_tok * n_ff);
  if (observer) observer->on_ffn_activation(il, sc.act.data(), n_tok, n_ff);
  for (int64_t i = 0; i < n_tok * n_ff; ++i) sc.fire[i] = std::fabs(sc.act[i]) > tau;
  if (sc.monitor && sc.monitor->audit())  // free here: every neuron's act is at hand
    sc.monitor->observe(il, sc.act.data(), sc.fire.data(), n_tok, n_ff);
  sc.stats.neurons += static_cast<uint64_t>(n_tok * n_ff);
  ffn_over_candidates(model, sparse, il, in, nullptr, n_ff, sc.fire.data(), gate, gate, up, out,
                      sc, pool);
}

std::vector<float> file_predictor_thresholds(const LlamaHParams& hp) {
  return !hp.predictor_thresholds.empty()
             ? hp.predictor_thresholds
             : std::vector<float>(static_cast<size_t>(hp.n_layer), hp.sparse_threshold);
}

void predictor_logits(const TensorView& fc1, const TensorView& fc2, ops::MatmulInput& in,
                      std::vector<float>& hid, float* logit, ops::MatmulInput& pred_in,
                      ThreadPool& pool) {
  const int64_t n_tok = in.n_tok(), rank = fc1.ne1;
  if (hid.size() < static_cast<size_t>(n_tok * rank)) hid.resize(static_cast<size_t>(n_tok * rank));
  ops::matmul(fc1, in, hid.data(), pool);
  for (int64_t i = 0; i < n_tok * rank; ++i) hid[i] = hid[i] > 0.0f ? hid[i] : 0.0f;
  ops::matmul(fc2, hid.data(), n_tok, logit, pool, pred_in);
}

void predict_firing(const LlamaModel& model, const SparseFfn& sparse, int il,
                    const float* residual, int64_t n_tok, SparseScratch& sc, ThreadPool& pool) {
  if (sc.fire_given == il) {  // the device decided already (hybrid_forward.h device_predict)
    sc.fire_given = -1;
    return;
  }
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_ff = model.hparams().n_ff;
  sc.res_in.reset(residual, n_tok, model.hparams().n_embd);
  const float thr = sc.predictor_threshold(sparse, il);
  if (sc.fire.size() < static_cast<size_t>(n_tok * n_ff)) sc.fire.resize(n_tok * n_ff);
  if (sc.logit.size() < static_cast<size_t>(n_tok * n_ff)) sc.logit.resize(n_tok * n_ff);
  predictor_logits(L.fc1, L.fc2, sc.res_in, sc.hid, sc.logit.data(), sc.pred_in, pool);
  sc.stats.bytes += all_bytes(L.fc1) + all_bytes(L.fc2);
  for (int64_t i = 0; i < n_tok * n_ff; ++i) sc.fire[i] = sc.logit[i] >= thr;
}

void sparse_ffn_subset(const LlamaModel& model, const SparseFfn& sparse, int il,
                       ops::MatmulInput& in, const int32_t* cand, int64_t n_cand, float* out,
                       SparseScratch& sc, ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const int64_t n_ff = hp.n_ff, n_tok = in.n_tok();
  // cfire [n_tok, n_cand]: token t fires candidate c. Thresholds: gate over the candidates only
  // (sc.logit), act in sc.act; predictor: the candidates' columns of predict_firing's mask.
  std::vector<uint8_t>& cfire = sc.cfire;
  if (cfire.size() < static_cast<size_t>(n_tok * n_cand)) cfire.resize(n_tok * n_cand);
  const bool pred = sparse.use_predictor();
  if (!pred) {
    if (sc.act.size() < static_cast<size_t>(n_tok * n_cand)) sc.act.resize(n_tok * n_cand);
    if (sc.logit.size() < static_cast<size_t>(n_tok * n_cand)) sc.logit.resize(n_tok * n_cand);
    if (n_cand > 0) ops::sparse_rows(L.ffn_gate, in, cand, n_cand, sc.logit.data(), pool);
    add_gate_bias(L, sc.logit.data(), cand, n_cand, n_tok);
    sc.stats.bytes += rows_bytes(L.ffn_gate, n_cand);
    ffn_activation(hp.ffn_act, sc.logit.data(), sc.act.data(), n_tok * n_cand);
    const float tau = sc.threshold(sparse, il);
    for (int64_t i = 0; i < n_tok * n_cand; ++i) cfire[i] = std::fabs(sc.act[i]) > tau;
  } else {
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t c = 0; c < n_cand; ++c) cfire[t * n_cand + c] = sc.fire[t * n_ff + cand[c]];
  }
  ffn_over_candidates(model, sparse, il, in, cand, n_cand, cfire.data(),
                      pred ? nullptr : sc.logit.data(), nullptr, nullptr, out, sc, pool);
}

}  // namespace hc
