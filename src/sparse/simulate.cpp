// The projection model of sparse/simulate.h: catalogs, firing statistics, and the modes on top
// of the planner's cost model (docs/SIMULATE.md has the equations and the sources).
#include "sparse/simulate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

namespace hc::sparse {

namespace {

constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// Queued operations of one dense layer on the device (model/hybrid_forward.cpp): attention
// rmsnorm, wq, wk, wv, 2 ropes, kv_store, attention, wo, add; FFN rmsnorm, gate, up, glu, down,
// add.
constexpr int kDenseLayerOps = 16;
constexpr int kOutputOps = 2;     // output rmsnorm and matrix
constexpr int kTransferOps = 2;   // the residual to the device, the result back
// Of those, the ones a paced CPU device sleeps in (HardwareSpec::paced_op_us): the 7 matrices of
// a dense layer; the output matrix; every copy; a hybrid layer's 4 attention matrices plus its
// 2 copies, and its FFN kernel plus 2 copies.
constexpr int kPacedDenseLayerOps = 7;
constexpr int kPacedAttnOps = 4 + 2;
constexpr int kPacedFfnOps = 1 + 2;
constexpr int kPacedOutputOps = 1 + 2;
// An MoE layer on the device, as llama.cpp's build_moe_ffn queues it: the attention's 10
// operations above; the router's 5 (FFN rmsnorm, router matrix, softmax, top-k, the chosen
// weights); the experts' 4 + n_used (gate, up, glu, down, each one mul_mat_id over the routed
// experts; the weighting, n_used - 1 adds of the experts' outputs, the residual add). Paced: 4
// attention matrices, the router, the 3 expert matrices.
constexpr int kAttnOps = 10;
constexpr int kMoeRouterOps = 5;
constexpr int kMoeExpertOps = 4;  // + n_expert_used
constexpr int kPacedMoeRestOps = 4 + 1;
constexpr int kPacedMoeExpertOps = 3;
// The hybrid executor's FFN on the device for an MoE layer: x and the routing in, gate, up,
// glu and down over its routed experts, their weighted sum, y out.
constexpr int kMoeHybridFfnOps = 8;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool finite_pos(double v) { return std::isfinite(v) && v > 0; }

// r, its error prefixed with "<what>: layer <l>: ".
template <class T>
Result<T> in_layer(Result<T> r, const char* what, size_t l) {
  if (!r.ok())
    return Status::Error(std::string(what) + ": layer " + std::to_string(l) + ": " + r.message());
  return r;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// ---- model shapes -------------------------------------------------------------------------

namespace {

ModelShape moe_shape(ModelShape s, int n_expert, int n_used, int64_t head_dim = 0,
                     bool qk_norm = false, double expert_sparsity = 0, int64_t pred_rank = 0) {
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  s.n_embd_head = head_dim;
  s.qk_norm = qk_norm;
  s.expert_sparsity = expert_sparsity;
  s.expert_predictor_rank = pred_rank;
  return s;
}

}  // namespace

const std::vector<ModelShape>& shape_catalog() {
  static const std::vector<ModelShape> kShapes = {
      {"llama2-7b", 32, 4096, 11008, 32, 32, 32000,
       "Llama 2 (Touvron et al. 2023, table 1) and meta-llama/Llama-2-7b-hf config.json"},
      {"llama2-13b", 40, 5120, 13824, 40, 40, 32000,
       "Llama 2 (Touvron et al. 2023) and meta-llama/Llama-2-13b-hf config.json"},
      {"llama-33b", 60, 6656, 17920, 52, 52, 32000,
       "LLaMA (Touvron et al. 2023, table 2: 33B dim 6656, 52 heads, 60 layers); n_ff 17920 "
       "from the 30B checkpoint's params (hidden = 256-multiple of 8/3 * 6656)"},
      {"llama2-70b", 80, 8192, 28672, 64, 8, 32000,
       "Llama 2 (Touvron et al. 2023: GQA with 8 KV heads for 70B) and "
       "meta-llama/Llama-2-70b-hf config.json"},
      moe_shape({"qwen3-30b-a3b", 48, 2048, 768, 32, 4, 151936,
                 "Qwen/Qwen3-30B-A3B config.json (moe_intermediate_size 768, head_dim 128, "
                 "q/k norms)"},
                128, 8, 128, true),
      moe_shape({"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000,
                 "Mixtral of Experts (Jiang et al. 2024) and mistralai/Mixtral-8x7B-v0.1 "
                 "config.json"},
                8, 2),
      moe_shape({"turbosparse-mixtral", 32, 4096, 14336, 32, 8, 57024,
                 "PowerInfer/TurboSparse-Mixtral config.json; dReLU experts 85% sparse (Song et "
                 "al. 2024, arXiv 2406.05955, section 6.2); predictors rank ~1k (checkpoint size)"},
                8, 2, 0, false, 0.85, 1024),
  };
  return kShapes;
}

Result<ModelShape> find_shape(const std::string& name) {
  std::string key = name;
  if (key == "7b") key = "llama2-7b";
  if (key == "13b") key = "llama2-13b";
  if (key == "33b" || key == "30b" || key == "llama2-33b") key = "llama-33b";
  if (key == "70b") key = "llama2-70b";
  if (key == "qwen3-moe" || key == "qwen3-30b") key = "qwen3-30b-a3b";
  if (key == "mixtral") key = "mixtral-8x7b";
  if (key == "turbosparse") key = "turbosparse-mixtral";
  std::string names;
  for (const ModelShape& s : shape_catalog()) {
    if (s.name == key) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  return Status::Error("unknown model shape '" + name + "': expected one of " + names +
                       " (or 7b, 13b, 33b, 70b, qwen3-moe, mixtral, turbosparse)");
}

// ---- byte sizes ---------------------------------------------------------------------------

uint64_t ModelBytes::ffn_read(int l) const {
  const LayerBytes& b = layers[static_cast<size_t>(l)];
  if (!moe()) return b.ffn_dense;
  return b.ffn_dense - static_cast<uint64_t>(n_expert - n_expert_used) * b.expert;
}

uint64_t ModelBytes::weight_bytes() const {
  uint64_t total = output;
  for (const LayerBytes& l : layers) total += l.attn + l.ffn_dense;
  return total;
}

GgmlType down_t_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return t;
    default: return GgmlType::Q8_0;
  }
}

double bytes_per_weight(GgmlType t) {
  const DTypeTraits tr = dtype_traits(t);
  return tr.block_size > 0 ? static_cast<double>(tr.type_size) / tr.block_size : 0.0;
}

namespace {

Status check_shape(const ModelShape& s) {
  const bool heads_ok = s.n_embd_head > 0 || (s.n_head > 0 && s.n_embd % s.n_head == 0);
  const bool moe_ok = s.n_expert == 0 || (s.n_expert_used > 0 && s.n_expert_used < s.n_expert);
  if (s.n_layer < 1 || s.n_embd < 1 || s.n_ff < 1 || s.n_head < 1 || s.n_head_kv < 1 ||
      s.n_vocab < 1 || !heads_ok || s.n_expert < 0 || !moe_ok || s.expert_predictor_rank < 0 ||
      !(s.expert_sparsity >= 0 && s.expert_sparsity < 1))
    return Status::Error(
        "model shape '" + s.name +
        "': expected positive sizes, n_embd a multiple of n_head (or a head size), 0 < experts "
        "used < experts and an expert sparsity in [0, 1), found n_layer " +
        std::to_string(s.n_layer) + ", n_embd " + std::to_string(s.n_embd) + ", n_ff " +
        std::to_string(s.n_ff) + ", heads " + std::to_string(s.n_head) + "/" +
        std::to_string(s.n_head_kv) + ", experts " + std::to_string(s.n_expert_used) + " of " +
        std::to_string(s.n_expert) + ", expert sparsity " + fmt(s.expert_sparsity));
  return Status::Ok();
}

uint64_t rows_of(GgmlType t, int64_t row_len, int64_t n_rows) {
  return static_cast<uint64_t>(row_bytes(t, row_len)) * static_cast<uint64_t>(n_rows);
}

}  // namespace

Result<ModelBytes> model_bytes(const ModelShape& s, GgmlType t) {
  const DTypeTraits tr = dtype_traits(t);
  if (tr.name == nullptr || tr.block_size <= 0 || tr.type_size <= 0)
    return Status::Error("weight type id " + std::to_string(static_cast<uint32_t>(t)) +
                         " has no known block size");
  HC_TRY(check_shape(s));
  const GgmlType dt = down_t_type_of(t);
  const int64_t q_dim = s.n_head * s.head_dim(), kv_dim = s.n_head_kv * s.head_dim();
  for (auto [n, ty] :
       {std::pair{s.n_embd, t}, std::pair{s.n_ff, t}, std::pair{s.n_embd, dt}, std::pair{q_dim, t}})
    if (n % dtype_traits(ty).block_size != 0)
      return Status::Error("model shape '" + s.name + "': a row of " + std::to_string(n) +
                           " weights is not a multiple of " + dtype_name(ty) + "'s block of " +
                           std::to_string(dtype_traits(ty).block_size));
  ModelBytes m;
  m.name = s.name;
  m.type = lower(dtype_name(t));
  m.n_embd = s.n_embd;
  m.n_ff = s.n_ff;
  m.n_vocab = s.n_vocab;
  m.n_expert = s.n_expert;
  m.n_expert_used = s.n_expert_used;
  const uint64_t row = static_cast<uint64_t>(row_bytes(t, s.n_embd));  // one row of n_embd
  const uint64_t norm = static_cast<uint64_t>(s.n_embd) * 4;
  LayerBytes l;
  // wq: q_dim rows, wk and wv: kv_dim rows (GQA shrinks them), wo: n_embd rows of q_dim.
  l.attn = norm + row * static_cast<uint64_t>(q_dim + 2 * kv_dim) + rows_of(t, q_dim, s.n_embd) +
           (s.qk_norm ? 2 * static_cast<uint64_t>(s.head_dim()) * 4 : 0);
  l.gate_row = row;
  l.up_row = row;
  l.down_t_row = static_cast<uint64_t>(row_bytes(dt, s.n_embd));
  // gate and up: n_ff rows of n_embd; down: n_embd rows of n_ff. MoE: one expert's.
  const uint64_t ffn = 2 * row * static_cast<uint64_t>(s.n_ff) + rows_of(t, s.n_ff, s.n_embd);
  if (s.moe()) {
    l.router = static_cast<uint64_t>(s.n_expert) * static_cast<uint64_t>(s.n_embd) * 4;
    l.expert = ffn;
    // fc1 [rank, n_embd], fc2 [n_ff, rank], F16 (PowerInfer's predictor layout).
    const int64_t r = s.expert_predictor_rank;
    l.expert_predictor =
        r > 0 ? rows_of(GgmlType::F16, s.n_embd, r) + rows_of(GgmlType::F16, r, s.n_ff) : 0;
    l.ffn_dense = norm + l.router + static_cast<uint64_t>(s.n_expert) * ffn;
  } else {
    l.ffn_dense = norm + ffn;
  }
  m.layers.assign(static_cast<size_t>(s.n_layer), l);
  m.kv_bytes_per_pos = 2 * static_cast<uint64_t>(kv_dim) * 2;  // K and V, fp16
  m.output = norm + row * static_cast<uint64_t>(s.n_vocab);
  return m;
}

// ---- firing statistics --------------------------------------------------------------------

double mean_firing(const std::vector<double>& p) {
  if (p.empty()) return 0.0;
  return std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(p.size());
}

namespace {

// Coverage of a descending curve (no sort).
double covering_sorted(const std::vector<double>& desc, double mass) {
  const double total = std::accumulate(desc.begin(), desc.end(), 0.0);
  if (total <= 0 || mass <= 0 || desc.empty()) return 0.0;
  const double need = std::min(mass, 1.0) * total;
  double cum = 0;
  for (size_t k = 0; k < desc.size(); ++k) {
    cum += desc[k];
    if (cum >= need) return static_cast<double>(k + 1) / static_cast<double>(desc.size());
  }
  return 1.0;
}

// The power law's fit for one exponent: log c such that the mean of min(1, c x_r^-a) is f.
struct PowerLawFitter {
  int64_t n;
  double f;
  std::vector<double> lx;  // log x_r, ascending in r (x_r = (r + 0.5) / n)

  PowerLawFitter(int64_t n_, double f_) : n(n_), f(f_), lx(static_cast<size_t>(n_)) {
    for (int64_t r = 0; r < n; ++r)
      lx[static_cast<size_t>(r)] = std::log((static_cast<double>(r) + 0.5) / static_cast<double>(n));
  }
  // log c for exponent a (bisection; the mean rises with c).
  double log_c(double a) const {
    if (a == 0) return std::log(f);
    // suffix[r] = sum_{s >= r} exp(-a lx_s), for the unclipped tail.
    std::vector<double> suffix(static_cast<size_t>(n) + 1, 0.0);
    for (int64_t r = n - 1; r >= 0; --r)
      suffix[static_cast<size_t>(r)] = suffix[static_cast<size_t>(r) + 1] +
                                       std::exp(-a * lx[static_cast<size_t>(r)]);
    double lo = -800, hi = 800;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      // Clipped prefix: ranks with mid - a lx_r >= 0, i.e. lx_r <= mid / a (lx ascending).
      const auto clip = static_cast<int64_t>(
          std::upper_bound(lx.begin(), lx.end(), mid / a) - lx.begin());
      const double sum = static_cast<double>(clip) +
                         std::exp(mid) * suffix[static_cast<size_t>(clip)];
      if (sum / static_cast<double>(n) < f) lo = mid;
      else hi = mid;
    }
    return 0.5 * (lo + hi);
  }
  std::vector<double> probs(double a, double lc) const {
    std::vector<double> p(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      p[static_cast<size_t>(r)] = std::min(1.0, std::exp(lc - a * lx[static_cast<size_t>(r)]));
    return p;
  }
};

constexpr double kMaxExponent = 20;  // past this the law is a step: the top f*n neurons at 1

}  // namespace

Result<PowerLaw> fit_power_law(int64_t n, double firing_share, double cover_share,
                               double cover_mass) {
  if (n < 1) return Status::Error("power law: expected n >= 1 neurons, found " + std::to_string(n));
  if (!(firing_share > 0 && firing_share < 1))
    return Status::Error("power law: expected a firing share in (0, 1) (1 - sparsity), found " +
                         fmt(firing_share));
  if (!(cover_mass > 0 && cover_mass < 1))
    return Status::Error("power law: expected a covered mass in (0, 1), found " + fmt(cover_mass));
  if (!(cover_share > 0 && cover_share <= 1))
    return Status::Error("power law: expected a covering share in (0, 1], found " +
                         fmt(cover_share));
  PowerLawFitter fit(n, firing_share);
  auto coverage = [&](double a) {
    return covering_sorted(fit.probs(a, fit.log_c(a)), cover_mass);
  };
  if (coverage(0) <= cover_share) return PowerLaw{0, firing_share};  // uniform already covers
  const double steepest = coverage(kMaxExponent);
  if (steepest > cover_share)
    return Status::Error("power law: the top " + fmt(100 * cover_share) + "% of neurons cannot "
                         "carry " + fmt(100 * cover_mass) + "% of the firings at a firing share "
                         "of " + fmt(firing_share) + " (the steepest law needs " +
                         fmt(100 * steepest) + "%)");
  double lo = 0, hi = kMaxExponent;  // coverage falls as a rises
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (coverage(mid) > cover_share) lo = mid;
    else hi = mid;
  }
  return PowerLaw{hi, std::exp(fit.log_c(hi))};
}

std::vector<double> power_law_probs(const PowerLaw& pl, int64_t n) {
  std::vector<double> p(static_cast<size_t>(std::max<int64_t>(n, 0)));
  const double lc = std::log(pl.c);
  for (int64_t r = 0; r < n; ++r) {
    const double lx = std::log((static_cast<double>(r) + 0.5) / static_cast<double>(n));
    p[static_cast<size_t>(r)] = std::min(1.0, std::exp(lc - pl.a * lx));
  }
  return p;
}

Result<std::vector<double>> expert_routing_probs(int n_expert, int n_expert_used, double skew) {
  if (!(n_expert_used > 0 && n_expert_used < n_expert))
    return Status::Error("routing: expected 0 < experts used < experts, found " +
                         std::to_string(n_expert_used) + " of " + std::to_string(n_expert));
  if (!(skew >= 0 && skew <= kMaxExponent))
    return Status::Error("routing: expected a skew exponent in [0, " + fmt(kMaxExponent) +
                         "], found " + fmt(skew));
  // Mean p = n_expert_used / n_expert: the p sum to the experts each token is routed to.
  const PowerLawFitter fit(n_expert, static_cast<double>(n_expert_used) / n_expert);
  return fit.probs(skew, fit.log_c(skew));
}

namespace {

// p scaled to sum to `total`, none above 1 (those at 1 stay there, the rest take the remainder).
void scale_capped(std::vector<double>& p, double total) {
  for (int it = 0; it < 64; ++it) {
    double capped = 0, free = 0;
    for (double v : p) {
      if (v >= 1)
        capped += 1;
      else
        free += v;
    }
    if (free <= 0 || std::abs(capped + free - total) <= 1e-12 * total) return;
    const double k = (total - capped) / free;
    for (double& v : p)
      if (v < 1) v = std::min(1.0, v * k);
  }
}

}  // namespace

Result<std::vector<std::vector<double>>> routing_from_counts(
    const std::vector<std::vector<double>>& counts, uint64_t n_tokens, int n_layer, int n_expert,
    int n_expert_used) {
  std::vector<std::vector<double>> src;
  for (size_t l = 0; l < counts.size(); ++l) {
    std::vector<float> c(counts[l].begin(), counts[l].end());
    HC_ASSIGN_OR_RETURN(std::vector<double> p,
                        in_layer(fire_probabilities(c, n_tokens), "routing", l));
    if (std::accumulate(p.begin(), p.end(), 0.0) <= 0)
      return Status::Error("routing: layer " + std::to_string(l) + " has no routings");
    src.push_back(std::move(p));
  }
  HC_ASSIGN_OR_RETURN(std::vector<std::vector<double>> out, rescale_firing(src, n_layer, n_expert));
  if (static_cast<int>(src.size()) == n_layer && static_cast<int>(src[0].size()) == n_expert)
    return out;
  for (std::vector<double>& p : out) scale_capped(p, n_expert_used);
  return out;
}

double neurons_covering(const std::vector<double>& p, double mass) {
  std::vector<double> d = p;
  std::sort(d.begin(), d.end(), std::greater<>());
  return covering_sorted(d, mass);
}

Result<std::vector<std::vector<double>>> rescale_firing(
    const std::vector<std::vector<double>>& src, int n_layer, int64_t n_ff) {
  if (src.empty() || src[0].empty())
    return Status::Error("firing statistics: no layers or no neurons to rescale");
  if (n_layer < 1 || n_ff < 1)
    return Status::Error("firing statistics: expected a target of >= 1 layer and neuron, found " +
                         std::to_string(n_layer) + " x " + std::to_string(n_ff));
  const size_t n_src = src[0].size();
  for (size_t l = 0; l < src.size(); ++l)
    if (src[l].size() != n_src)
      return Status::Error("firing statistics: layer " + std::to_string(l) + " has " +
                           std::to_string(src[l].size()) + " neurons, layer 0 has " +
                           std::to_string(n_src));
  if (static_cast<int>(src.size()) == n_layer && static_cast<int64_t>(n_src) == n_ff) return src;
  std::vector<std::vector<double>> out(static_cast<size_t>(n_layer));
  const double ls = static_cast<double>(src.size());
  for (int l = 0; l < n_layer; ++l) {
    const auto sl = std::min(src.size() - 1,
                             static_cast<size_t>((l + 0.5) * ls / static_cast<double>(n_layer)));
    std::vector<double> d = src[sl];
    std::sort(d.begin(), d.end(), std::greater<>());
    std::vector<double>& o = out[static_cast<size_t>(l)];
    o.resize(static_cast<size_t>(n_ff));
    for (int64_t j = 0; j < n_ff; ++j) {
      double u = (static_cast<double>(j) + 0.5) / static_cast<double>(n_ff) *
                     static_cast<double>(n_src) - 0.5;
      u = std::clamp(u, 0.0, static_cast<double>(n_src - 1));
      const auto i0 = static_cast<size_t>(u);
      const size_t i1 = std::min(i0 + 1, n_src - 1);
      const double w = u - static_cast<double>(i0);
      o[static_cast<size_t>(j)] = (1 - w) * d[i0] + w * d[i1];
    }
  }
  return out;
}

std::vector<std::vector<double>> drift_firing(const std::vector<std::vector<double>>& p,
                                              double share, uint64_t seed) {
  std::vector<std::vector<double>> out = p;
  if (!(share > 0)) return out;
  for (size_t l = 0; l < p.size(); ++l) {
    const size_t n = p[l].size();
    const auto m = static_cast<size_t>(std::llround(std::min(share, 1.0) * static_cast<double>(n)));
    if (m < 2) continue;
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + l + 1);
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    for (size_t i = 0; i < m; ++i) {  // partial Fisher-Yates: m chosen, in random order
      std::uniform_int_distribution<size_t> pick(i, n - 1);
      std::swap(idx[i], idx[pick(rng)]);
    }
    for (size_t i = 0; i < m; ++i) out[l][idx[i]] = p[l][idx[(i + 1) % m]];
  }
  return out;
}

double top_overlap(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double top_share) {
  if (a.empty() || a.size() != b.size()) return 0.0;
  double sum = 0;
  for (size_t l = 0; l < a.size(); ++l) {
    const size_t n = a[l].size();
    if (n == 0 || b[l].size() != n) return 0.0;
    const auto k = std::max<size_t>(
        1, static_cast<size_t>(std::ceil(top_share * static_cast<double>(n))));
    const std::vector<int32_t> oa = neurons_by_frequency(a[l]), ob = neurons_by_frequency(b[l]);
    std::vector<char> in_a(n, 0);
    for (size_t i = 0; i < k && i < n; ++i) in_a[static_cast<size_t>(oa[i])] = 1;
    size_t both = 0;
    for (size_t i = 0; i < k && i < n; ++i) both += in_a[static_cast<size_t>(ob[i])];
    sum += static_cast<double>(both) / static_cast<double>(std::min(k, n));
  }
  return sum / static_cast<double>(a.size());
}

// ---- hardware -----------------------------------------------------------------------------

double HostEfficiency::sparse_at(double share) const {
  if (sparse_rel.empty()) return 1.0;
  if (share <= sparse_rel.front().first) return sparse_rel.front().second;
  if (share >= sparse_rel.back().first) return sparse_rel.back().second;
  for (size_t i = 1; i < sparse_rel.size(); ++i) {
    const auto [x1, y1] = sparse_rel[i];
    if (share <= x1) {
      const auto [x0, y0] = sparse_rel[i - 1];
      return x1 > x0 ? y0 + (y1 - y0) * (share - x0) / (x1 - x0) : y1;
    }
  }
  return sparse_rel.back().second;
}

Status HostEfficiency::validate() const {
  if (!finite_pos(dense_max) || !finite_pos(rel_max))
    return Status::Error("host efficiency: expected positive bounds, found dense_max " +
                         fmt(dense_max) + ", rel_max " + fmt(rel_max));
  if (!(gate_rows_rel >= 0 && gate_rows_rel <= rel_max))
    return Status::Error("host efficiency: expected a gate-rows ratio in [0, " + fmt(rel_max) +
                         "], found " + fmt(gate_rows_rel));
  if (!finite_pos(dense) || dense > dense_max)
    return Status::Error("host efficiency: expected a dense decode efficiency in (0, " +
                         fmt(dense_max) + "], found " + fmt(dense));
  for (size_t i = 0; i < sparse_rel.size(); ++i) {
    const auto [s, r] = sparse_rel[i];
    if (!(s > 0 && s <= 1) || !finite_pos(r) || r > rel_max)
      return Status::Error("host efficiency: point " + std::to_string(i) + " is (" + fmt(s) +
                           ", " + fmt(r) + "), expected a firing share in (0, 1] and a ratio in "
                           "(0, " + fmt(rel_max) + "]");
    if (i > 0 && !(s > sparse_rel[i - 1].first))
      return Status::Error("host efficiency: firing shares must ascend, found " +
                           fmt(sparse_rel[i - 1].first) + " then " + fmt(s));
  }
  return Status::Ok();
}

HostEfficiency builtin_host_efficiency(GgmlType t) {
  // docs/BENCHMARKS.md, this machine, 2 threads, 7B shape (n_embd 4096, n_ff 11008):
  //   dense: decode roofline share of the 7B-shaped files (Q4_0 85.1%, Q8_0 86.9%, Q4_K 79.0%);
  //          F16: 16.1 tok/s x 1.88 GB = 30.3 GB/s against the 34.9-35.8 GB/s probe = 0.856.
  //   sparse: hc-ffn-bench ffn_sparse (gate, up, down_t over a uniform random firing set) against
  //          ffn_dense, microseconds per token at 50 / 80 / 90 / 95% sparsity; GB/s from the
  //          bytes each reads (down_t is Q8_0 for block types).
  struct Row {
    GgmlType type;
    double dense_share;
    double dense_us;
    double sparse_us[4];  // sparsity 50, 80, 90, 95%
  };
  static const Row kRows[] = {
      {GgmlType::F16, 0.856, 9378, {4935, 1895, 1069, 501}},
      {GgmlType::Q8_0, 0.869, 4845, {4165, 1657, 785, 383}},
      {GgmlType::Q4_0, 0.851, 3080, {3988, 1234, 692, 323}},
      {GgmlType::Q4_K, 0.790, 2907, {3201, 1429, 585, 287}},
  };
  // Nearest measured type: by bytes per weight (F32/BF16 -> F16, Q5/Q6 -> Q8_0, 4-bit -> Q4_0/Q4_K).
  const Row* row = &kRows[2];
  const char* note = "";
  switch (t) {
    case GgmlType::F16: row = &kRows[0]; break;
    case GgmlType::Q8_0: row = &kRows[1]; break;
    case GgmlType::Q4_0: row = &kRows[2]; break;
    case GgmlType::Q4_K: row = &kRows[3]; break;
    case GgmlType::F32: case GgmlType::BF16: row = &kRows[0]; note = " (nearest measured: F16)"; break;
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q6_K: case GgmlType::Q8_1:
      row = &kRows[1]; note = " (nearest measured: Q8_0)"; break;
    case GgmlType::Q5_K: case GgmlType::Q3_K: case GgmlType::Q2_K:
      row = &kRows[3]; note = " (nearest measured: Q4_K)"; break;
    default: row = &kRows[2]; note = " (nearest measured: Q4_0)"; break;
  }
  const int64_t n_embd = 4096, n_ff = 11008;
  const GgmlType rt = row->type, dt = down_t_type_of(rt);
  const double dense_bytes = 2.0 * n_ff * static_cast<double>(row_bytes(rt, n_embd)) +
                             static_cast<double>(n_embd) * static_cast<double>(row_bytes(rt, n_ff));
  const double neuron = 2.0 * static_cast<double>(row_bytes(rt, n_embd)) +
                        static_cast<double>(row_bytes(dt, n_embd));
  const double dense_gbps = dense_bytes / (row->dense_us * 1e-6) / kGB;
  HostEfficiency e;
  e.dense = row->dense_share;
  const double firing[4] = {0.05, 0.10, 0.20, 0.50};
  for (int i = 0; i < 4; ++i) {
    const double us = row->sparse_us[3 - i];
    const double gbps = firing[i] * n_ff * neuron / (us * 1e-6) / kGB;
    e.sparse_rel.emplace_back(firing[i], gbps / dense_gbps);
  }
  // Every row in order (the cold gate of a hybrid layer): "the per-row kernels stream at 15-22
  // GB/s on two threads even over all rows in order, against 25-30 GB/s for the decode layout's
  // 16-row kernels" (midpoints: 18.5 / 27.5), or the 50% point when that is higher (F16).
  e.sparse_rel.emplace_back(1.0, std::max(18.5 / 27.5, e.sparse_rel.back().second));
  e.source = std::string("built-in (docs/BENCHMARKS.md, ") + dtype_name(rt) + " on this machine)" +
             note;
  return e;
}

uint64_t HardwareSpec::default_budget() const {
  if (!has_device) return 0;
  if (dev_mem_bytes == 0) return std::numeric_limits<uint64_t>::max() / 4;
  return dev_mem_bytes > dev_reserve_bytes ? dev_mem_bytes - dev_reserve_bytes : 0;
}

Status HardwareSpec::validate() const {
  const std::string where = "hardware '" + key + "': ";
  if (!finite_pos(host_peak_gbps))
    return Status::Error(where + "expected a host bandwidth > 0 GB/s, found " + fmt(host_peak_gbps));
  if (!(host_read_fraction > 0 && host_read_fraction <= 1))
    return Status::Error(where + "expected a host read fraction in (0, 1], found " +
                         fmt(host_read_fraction));
  if (!has_device) return Status::Ok();
  if (!finite_pos(dev_peak_gbps) || !finite_pos(link_gbps))
    return Status::Error(where + "expected device and link bandwidths > 0 GB/s, found " +
                         fmt(dev_peak_gbps) + " and " + fmt(link_gbps));
  if (!(dev_eff > 0 && dev_eff <= 1))
    return Status::Error(where + "expected a device efficiency in (0, 1], found " + fmt(dev_eff));
  if (!(op_us >= 0 && std::isfinite(op_us)) || !(sync_us >= 0 && std::isfinite(sync_us)))
    return Status::Error(where + "expected op and sync costs >= 0 us, found " + fmt(op_us) +
                         " and " + fmt(sync_us));
  return Status::Ok();
}

const std::vector<HardwareSpec>& hardware_catalog() {
  // Sources and assumptions: docs/SIMULATE.md, "Hardware catalog".
  auto gpu = [](std::string key, std::string desc, uint64_t mem, double gbps, double host_gbps,
                int cores, std::string source) {
    HardwareSpec h;
    h.key = std::move(key);
    h.description = std::move(desc);
    h.host_peak_gbps = host_gbps;
    h.host_read_fraction = 0.9;  // AIDA64 read / theoretical, dual-channel DDR4 (guru3d)
    h.host_cores = cores;
    h.has_device = true;
    h.dev_mem_bytes = mem;
    h.dev_reserve_bytes = kGiB;  // assumption: CUDA context, cuBLAS workspace, scratch
    h.dev_peak_gbps = gbps;
    h.dev_eff = 0.66;  // llama.cpp tg128 on an RTX 4090: 66.3% of 1008 GB/s (r/LocalLLaMA)
    h.link_gbps = 25;  // assumption: ~80% of PCIe 4.0 x16's 31.5 GB/s per direction
    h.op_us = 1;       // assumption: asynchronous launches overlap the GPU's work
    h.sync_us = 10;    // assumption: copy in, kernel, copy out, stream sync
    h.source = std::move(source);
    return h;
  };
  static const std::vector<HardwareSpec> kHw = {
      gpu("rtx4090", "RTX 4090 24 GiB (1008 GB/s), PCIe 4.0 x16, i9-13900K + DDR5 67.2 GB/s",
          24 * kGiB, 1008, 67.2, 8,
          "NVIDIA RTX 4090 spec (384-bit GDDR6X at 21 Gbps = 1008 GB/s); host: PowerInfer's "
          "PC-High (Song et al., SOSP '24, section 8.1)"),
      gpu("a100-80g", "A100 80GB PCIe (1935 GB/s), PCIe 4.0 x16, 8-channel DDR4-3200 host",
          80 * kGiB, 1935, 204.8, 64,
          "NVIDIA A100 datasheet (80GB PCIe: 1,935 GB/s); host: assumption (one EPYC socket, "
          "8 x DDR4-3200 = 204.8 GB/s)"),
      gpu("a100-40g", "A100 40GB PCIe (1555 GB/s), PCIe 4.0 x16, 8-channel DDR4-3200 host",
          40 * kGiB, 1555, 204.8, 64,
          "NVIDIA A100 datasheet (40GB PCIe: 1,555 GB/s); host: assumption as a100-80g"),
  };
  return kHw;
}

Result<HardwareSpec> find_hardware(const std::string& key) {
  std::string k = key;
  if (k == "rtx4090-pcie4-ddr5" || k == "4090") k = "rtx4090";
  if (k == "a100-80g-pcie" || k == "a100" || k == "a100-80gb") k = "a100-80g";
  if (k == "a100-40g-pcie" || k == "a100-40gb") k = "a100-40g";
  std::string keys;
  for (const HardwareSpec& h : hardware_catalog()) {
    if (h.key == k) return h;
    keys += h.key + ", ";
  }
  return Status::Error("unknown hardware '" + key + "': expected one of " + keys +
                       "host (this machine, from --calibration) or all");
}

// ---- simulation ---------------------------------------------------------------------------

const ModeResult* SimResult::find(const std::string& mode) const {
  for (const ModeResult& m : modes)
    if (m.mode == mode) return &m;
  return nullptr;
}

const ModeResult* SimResult::llamacpp() const {
  const ModeResult* r = find("llamacpp-cpu-moe");
  return r ? r : find("dense-offload");
}

Status validate_input(const SimInput& in) {
  const ModelBytes& m = in.model;
  if (m.layers.empty() || m.n_ff < 1 || m.n_embd < 1)
    return Status::Error("model '" + m.name + "': no layers or neurons");
  if (m.moe() && !(m.n_expert_used > 0 && m.n_expert_used < m.n_expert))
    return Status::Error("model '" + m.name + "': expected 0 < experts used < experts, found " +
                         std::to_string(m.n_expert_used) + " of " + std::to_string(m.n_expert));
  if (!(in.expert_firing > 0 && in.expert_firing <= 1))
    return Status::Error("expert firing share: expected (0, 1], found " + fmt(in.expert_firing));
  HC_TRY(in.hw.validate());
  HC_TRY(in.eff.validate());
  if (in.profile.size() != m.layers.size())
    return Status::Error("firing statistics: " + std::to_string(in.profile.size()) +
                         " layers, the model has " + std::to_string(m.layers.size()));
  const char* unit = m.moe() ? " experts" : " neurons";
  for (size_t l = 0; l < in.profile.size(); ++l) {
    if (static_cast<int64_t>(in.profile[l].size()) != m.n_units())
      return Status::Error("firing statistics: layer " + std::to_string(l) + " has " +
                           std::to_string(in.profile[l].size()) + unit + ", the model " +
                           std::to_string(m.n_units()));
    for (double p : in.profile[l])
      if (!(p >= 0 && p <= 1))
        return Status::Error("firing statistics: layer " + std::to_string(l) +
                             " has a probability " + fmt(p) + ", expected [0, 1]");
  }
  return Status::Ok();
}

namespace {

double host_rate(const SimInput& in) { return in.hw.host_read_gbps() * in.eff.dense * kGB; }

Status validate_options(const SimOptions& opt) {
  if (opt.n_ctx < 1) return Status::Error("context: expected >= 1 positions, found " +
                                          std::to_string(opt.n_ctx));
  if (!(opt.max_union_share >= 0 && opt.max_union_share <= 1))
    return Status::Error("union limit: expected a share in [0, 1], found " +
                         fmt(opt.max_union_share));
  if (!(opt.drift >= 0 && opt.drift <= 1))
    return Status::Error("drift: expected a share in [0, 1], found " + fmt(opt.drift));
  if (!(opt.drift_period_tokens > 0))
    return Status::Error("drift period: expected > 0 tokens, found " +
                         fmt(opt.drift_period_tokens));
  if (opt.granule < 1) return Status::Error("granule: expected >= 1, found " +
                                            std::to_string(opt.granule));
  if (opt.predictor_rank < 0)
    return Status::Error("predictor rank: expected >= 0, found " +
                         std::to_string(opt.predictor_rank));
  return Status::Ok();
}

// The planner's hardware figures and the parts of a PlanInput common to dense and MoE models.
Result<PlanInput> plan_input_base(const SimInput& in, const std::vector<std::vector<double>>& p) {
  const ModelBytes& m = in.model;
  if (p.size() != m.layers.size())
    return Status::Error("firing statistics: " + std::to_string(p.size()) + " layers, the model " +
                         std::to_string(m.layers.size()));
  PlanInput pin;
  pin.hw.host_gbps = in.hw.host_read_gbps() * in.eff.dense;
  // Without a device the hot/cold modes are not run; the planner still wants positive figures.
  pin.hw.dev_gbps = in.hw.has_device ? in.hw.dev_gbps() : 1;
  pin.hw.link_gbps = in.hw.has_device ? in.hw.link_gbps : 1;
  pin.hw.op_us = in.hw.op_us;
  pin.hw.sync_us = in.hw.sync_us;
  pin.hw.dev_overhead_bytes = in.hw.dev_overhead_bytes;
  pin.hw.dev_fixed_bytes = in.hw.dev_fixed_bytes;
  pin.n_embd = m.n_embd;
  pin.other_s = static_cast<double>(m.output) / (pin.hw.host_gbps * kGB);
  return pin;
}

uint64_t round_bytes(double b) { return static_cast<uint64_t>(std::llround(b)); }

}  // namespace

Result<PlanInput> hybrid_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                    const SimOptions& opt) {
  const ModelBytes& m = in.model;
  if (m.moe())
    return Status::Error("model '" + m.name +
                         "' has experts: its planner input is moe_plan_input's");
  HC_ASSIGN_OR_RETURN(PlanInput pin, plan_input_base(in, p));
  pin.device_reads_all_hot = !opt.predictor;
  const int64_t rank = opt.predictor_rank > 0 ? opt.predictor_rank : std::max<int64_t>(1, m.n_embd / 16);
  const double rel_gate_rows = in.eff.gate_rows();
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerBytes& b = m.layers[l];
    LayerCosts c;
    c.attn_bytes = b.attn;
    c.kv_bytes = kv;
    c.kv_read_bytes = kv / 2;  // a half-full context on average
    c.neuron_bytes = b.neuron();
    const double rel = in.eff.sparse_at(std::max(1e-6, mean_firing(p[l])));
    const double rows = static_cast<double>(b.up_row + b.down_t_row + (opt.predictor ? b.gate_row : 0));
    c.host_neuron_bytes = static_cast<uint64_t>(std::llround(rows / rel));
    c.host_cold_bytes = opt.predictor ? 0 : static_cast<uint64_t>(std::llround(
                                                static_cast<double>(b.gate_row) / rel_gate_rows));
    if (opt.predictor) c.predictor_bytes = 2 * static_cast<uint64_t>(rank * (m.n_embd + m.n_ff));
    c.predictor_follows_attn = opt.predictor;  // as DeviceModel places it (planner.h)
    c.fire_prob = p[l];
    pin.layers.push_back(std::move(c));
  }
  HC_TRY(pin.validate());
  return pin;
}

LayerCosts moe_layer_costs(const MoeLayerBytes& b, std::vector<double> routing) {
  LayerCosts c;
  c.attn_bytes = b.attn;
  c.kv_bytes = b.kv;
  c.kv_read_bytes = b.kv_read;
  c.neuron_bytes = b.expert_device;
  const uint64_t store = b.expert_store;
  c.hot_store_bytes = [store](int64_t n) { return static_cast<uint64_t>(n) * store; };
  c.host_neuron_bytes = b.expert_host;
  c.host_cold_bytes = 0;  // a cold expert the router did not pick costs nothing
  c.host_fixed_bytes = b.router;
  c.fire_prob = std::move(routing);
  return c;
}

namespace {

// Layer l's expert figures for moe_layer_costs (see moe_plan_input).
MoeLayerBytes moe_layer_bytes(const SimInput& in, int l, uint64_t kv) {
  const ModelBytes& m = in.model;
  const LayerBytes& b = m.layers[static_cast<size_t>(l)];
  MoeLayerBytes mb;
  mb.attn = b.attn;
  mb.kv = kv;
  mb.kv_read = kv / 2;  // a half-full context on average
  mb.router = b.ffn_dense - static_cast<uint64_t>(m.n_expert) * b.expert;  // norm + router
  const double f = in.expert_firing;
  if (f >= 1) {  // dense experts: read whole on either side
    mb.expert_store = mb.expert_device = mb.expert_host = b.expert;
    return mb;
  }
  // Sparse experts in the sparse layout (gate, up, down_t rows) with their predictor.
  const auto n_ff = static_cast<double>(m.n_ff);
  const double rel = in.eff.sparse_at(f), pred = static_cast<double>(b.expert_predictor);
  const double gate = n_ff * static_cast<double>(b.gate_row);
  const double up_down = n_ff * static_cast<double>(b.up_row + b.down_t_row);
  mb.expert_store = round_bytes(gate + up_down + pred);
  if (b.expert_predictor > 0) {  // the predictor, then the firing rows of gate, up and down_t
    mb.expert_device = round_bytes(pred + f * (gate + up_down));
    mb.expert_host = round_bytes(pred + f * (gate + up_down) / rel);
  } else {  // every gate row (the host: decode layout, dense rate), then the firing rows
    mb.expert_device = round_bytes(gate + f * up_down);
    mb.expert_host = round_bytes(gate + f * up_down / rel);
  }
  return mb;
}

}  // namespace

Result<PlanInput> moe_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                 const SimOptions& opt) {
  const ModelBytes& m = in.model;
  if (!m.moe()) return Status::Error("model '" + m.name + "' has no experts");
  HC_ASSIGN_OR_RETURN(PlanInput pin, plan_input_base(in, p));
  pin.device_reads_all_hot = false;  // the device computes only its routed experts
  pin.ffn_device_ops = kMoeHybridFfnOps;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  for (int l = 0; l < m.n_layer(); ++l)
    pin.layers.push_back(moe_layer_costs(moe_layer_bytes(in, l, kv), p[static_cast<size_t>(l)]));
  HC_TRY(pin.validate());
  return pin;
}

double cpu_moe_seconds(const SimInput& in, const SimOptions& opt, const CpuMoeSplit& split,
                       uint64_t* device_bytes) {
  const ModelBytes& m = in.model;
  const double host = host_rate(in);
  const double dev = in.hw.has_device ? in.hw.dev_gbps() * kGB : host;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer(), n_dev = std::clamp(split.n_gpu_layers, 0, n_layer);
  double s = 0;
  uint64_t bytes = 0;
  int ops = 0, paced = 0, trips = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    const uint64_t experts = static_cast<uint64_t>(m.n_expert) * b.expert;
    const uint64_t rest = b.attn + b.ffn_dense - experts;  // attention, norms, router
    const bool on_dev = l >= n_layer - n_dev, experts_dev = on_dev && l >= split.n_cpu_moe;
    s += static_cast<double>(rest + kv / 2) / (on_dev ? dev : host) +
         static_cast<double>(static_cast<uint64_t>(m.n_expert_used) * b.expert) /
             (experts_dev ? dev : host);
    if (on_dev) {
      bytes += rest + kv;
      ops += kAttnOps + kMoeRouterOps;
      paced += kPacedMoeRestOps;
    }
    if (experts_dev) {
      bytes += experts;
      ops += kMoeExpertOps + m.n_expert_used;
      paced += kPacedMoeExpertOps;
    } else if (on_dev) {  // the normed x to the host's experts and their sum back, then the add
      ++trips;
      ops += kTransferOps + 1;
      paced += kTransferOps;
    }
  }
  if (n_dev > 0 || split.output) {
    const double back = static_cast<double>(split.output ? m.n_vocab : m.n_embd) * 4;
    ops += kTransferOps + (split.output ? kOutputOps : 0);
    paced += kTransferOps + (split.output ? 1 : 0);
    s += ops * in.hw.op_us * kUs + paced * in.hw.paced_op_us * kUs +
         (1 + trips) * in.hw.sync_us * kUs +
         (static_cast<double>(m.n_embd) * 4 * (1 + 2 * trips) + back) / (in.hw.link_gbps * kGB);
    bytes += in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  }
  s += static_cast<double>(m.output) / (split.output ? dev : host);
  if (split.output) bytes += m.output;
  if (device_bytes) *device_bytes = bytes;
  return s;
}

CpuMoeSplit cpu_moe_split_that_fits(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer();
  CpuMoeSplit sp;
  sp.n_cpu_moe = n_layer;
  if (!in.hw.has_device) return sp;
  if (opt.n_cpu_moe >= 0) return {n_layer, true, std::min(opt.n_cpu_moe, n_layer)};
  std::vector<uint64_t> rest(static_cast<size_t>(n_layer)), experts(rest.size());
  uint64_t used = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  for (int l = n_layer - 1; l >= 0; --l) {  // -ngl: trailing layers' non-expert tensors
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    experts[static_cast<size_t>(l)] = static_cast<uint64_t>(m.n_expert) * b.expert;
    rest[static_cast<size_t>(l)] = b.attn + b.ffn_dense - experts[static_cast<size_t>(l)] + kv;
    if (used + rest[static_cast<size_t>(l)] > opt.budget_bytes) return sp;
    used += rest[static_cast<size_t>(l)];
    ++sp.n_gpu_layers;
  }
  if (used + m.output > opt.budget_bytes) return sp;
  sp.output = true;
  used += m.output;
  // --n-cpu-moe: the fewest leading layers whose experts stay on the host.
  for (int l = n_layer - 1; l >= 0 && used + experts[static_cast<size_t>(l)] <= opt.budget_bytes;
       --l) {
    used += experts[static_cast<size_t>(l)];
    sp.n_cpu_moe = l;
  }
  return sp;
}

double dense_seconds(const SimInput& in, const SimOptions& opt, int n_dev, bool output_dev,
                     uint64_t* device_bytes) {
  const ModelBytes& m = in.model;
  if (m.moe()) {  // whole layers: a layer's experts are where the layer is
    const int n = std::clamp(n_dev, 0, m.n_layer());
    return cpu_moe_seconds(in, opt, {n, output_dev, m.n_layer() - n}, device_bytes);
  }
  const double host = host_rate(in);
  const double dev = in.hw.has_device ? in.hw.dev_gbps() * kGB : host;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer();
  n_dev = std::clamp(n_dev, 0, n_layer);
  double s = 0;
  uint64_t bytes = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    const double read = static_cast<double>(b.attn + b.ffn_dense + kv / 2);
    if (l >= n_layer - n_dev) {
      s += read / dev;
      bytes += b.attn + b.ffn_dense + kv;
    } else {
      s += read / host;
    }
  }
  const bool uses = n_dev > 0 || output_dev;
  if (uses) {
    const int ops = n_dev * kDenseLayerOps + kTransferOps + (output_dev ? kOutputOps : 0);
    const double back = static_cast<double>(output_dev ? m.n_vocab : m.n_embd) * 4;
    const int paced = n_dev * kPacedDenseLayerOps + kTransferOps + (output_dev ? 1 : 0);
    s += ops * in.hw.op_us * kUs + paced * in.hw.paced_op_us * kUs + in.hw.sync_us * kUs +
         (static_cast<double>(m.n_embd) * 4 + back) / (in.hw.link_gbps * kGB);
    bytes += in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  }
  s += static_cast<double>(m.output) / (output_dev ? dev : host);
  if (output_dev) bytes += m.output;
  if (device_bytes) *device_bytes = bytes;
  return s;
}

void dense_layers_that_fit(const SimInput& in, const SimOptions& opt, int* n_dev,
                           bool* output_dev) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  uint64_t used = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  *n_dev = 0;
  *output_dev = false;
  if (!in.hw.has_device) return;
  for (int l = m.n_layer() - 1; l >= 0; --l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    used += b.attn + b.ffn_dense + kv;
    if (used > opt.budget_bytes) return;
    ++*n_dev;
  }
  *output_dev = used + m.output <= opt.budget_bytes;
}

namespace {

// Layer l's FFN on the host alone, its gate dense (the decode layout), in seconds. A firing
// share past the union limit runs up and down over every row (the executor's dense fallback).
double host_only_ffn_s(const SimInput& in, const SimOptions& opt, const PlanInput& pin, int l) {
  const LayerCosts& c = pin.layers[static_cast<size_t>(l)];
  const LayerBytes& b = in.model.layers[static_cast<size_t>(l)];
  double bytes = 0;
  const double share = mean_firing(c.fire_prob);
  if (c.host_cold_bytes > 0 && share > opt.max_union_share)
    bytes += static_cast<double>(in.model.n_ff) * static_cast<double>(b.up_row + b.down_t_row) /
             in.eff.sparse_at(1.0);
  else
    for (double p : c.fire_prob) bytes += p * static_cast<double>(c.host_neuron_bytes);
  bytes += static_cast<double>(c.host_fixed_bytes) +
           (c.predictor_on_device ? 0.0 : static_cast<double>(c.predictor_bytes));
  if (c.host_cold_bytes > 0)  // threshold mode: every gate row, at the dense rate
    bytes += static_cast<double>(in.model.n_ff) *
             static_cast<double>(in.model.layers[static_cast<size_t>(l)].gate_row);
  return bytes / (pin.hw.host_gbps * kGB);
}

// An MoE layer's router (host_fixed_bytes) must run before the device can start its experts, but
// the planner counts it in the host half, which overlaps the device's: the time that adds when
// the layer uses an overlapping device.
double moe_router_s(const PlanInput& pin, const LayerCosts& c, const LayerTime& lt,
                    bool overlapped) {
  if (!overlapped) return 0.0;
  const double router_s = static_cast<double>(c.host_fixed_bytes) / (pin.hw.host_gbps * kGB);
  return router_s + std::max(lt.ffn_device_s, lt.ffn_host_s - router_s) -
         std::max(lt.ffn_device_s, lt.ffn_host_s);
}

// A plan evaluated on `pin` with the terms the planner's model lacks (see simulate.h).
Result<ModeResult> evaluate(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                            const PlacementPlan& plan, bool output_dev, const char* mode) {
  HC_ASSIGN_OR_RETURN(Prediction pr, predict_plan(pin, plan));
  const ModelBytes& m = in.model;
  ModeResult r;
  r.mode = mode;
  double s = pr.seconds_per_token, mass_dev = 0, mass_all = 0;
  bool any = pr.device_bytes > 0;
  for (int l = 0; l < m.n_layer(); ++l) {
    const LayerPlacement& lp = plan.layers[static_cast<size_t>(l)];
    const LayerCosts& c = pin.layers[static_cast<size_t>(l)];
    const double mass = std::accumulate(c.fire_prob.begin(), c.fire_prob.end(), 0.0);
    mass_all += mass;
    mass_dev += pr.layers[static_cast<size_t>(l)].device_mass * mass;
    r.hot_neurons += static_cast<int64_t>(lp.hot.size());
    r.attn_on_device += lp.attn_on_device ? 1 : 0;
    r.layers_on_device += (!lp.hot.empty() || lp.attn_on_device) ? 1 : 0;
    const LayerTime& lt = pr.layers[static_cast<size_t>(l)];
    if (!in.hw.overlap && (!lp.hot.empty() || c.predictor_on_device))
      s += std::min(lt.ffn_device_s, lt.ffn_host_s);  // sum of the halves, not their max
    s += ((lp.attn_on_device ? kPacedAttnOps : 0) +
          (!lp.hot.empty() || c.predictor_on_device ? kPacedFfnOps : 0)) *
         in.hw.paced_op_us * kUs;
    if (m.moe()) {
      s += moe_router_s(pin, c, lt, !lp.hot.empty() && in.hw.overlap);
    } else if (lp.hot.empty() && !opt.predictor && !c.predictor_on_device) {
      // A layer without device neurons runs its gate dense (the decode layout) instead of
      // reading the cold gate rows in order, and past the union limit its up and down over
      // every row.
      s += host_only_ffn_s(in, opt, pin, l) - lt.ffn_host_s;
    }
  }
  r.device_bytes = pr.device_bytes;
  if (output_dev) {
    s += -pin.other_s + static_cast<double>(m.output) / (in.hw.dev_gbps() * kGB) +
         kOutputOps * in.hw.op_us * kUs + kPacedOutputOps * in.hw.paced_op_us * kUs +
         in.hw.sync_us * kUs +
         static_cast<double>(m.n_embd + m.n_vocab) * 4 / (in.hw.link_gbps * kGB);
    r.device_bytes = (any ? r.device_bytes : in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes) +
                     m.output;
    r.output_on_device = true;
  }
  r.s_per_token = s;
  r.tok_s = s > 0 ? 1.0 / s : 0.0;
  r.device_mass = mass_all > 0 ? mass_dev / mass_all : 0.0;
  return r;
}

Result<PlanResult> make_plan(const PlanInput& pin, uint64_t budget, const SimOptions& opt) {
  PlannerOptions po;
  po.budget_bytes = budget;
  po.granule = opt.granule;
  po.ilp_time_limit_s = opt.ilp_time_limit_s;
  po.log_progress = false;
  if (opt.use_ilp) return plan_best(pin, po);
  return plan_greedy(pin, po);
}

// The planner's plan for `pin` within the budget. The planner charges every cold gate row at
// the rate of the row kernels the hybrid layer uses, but a layer with no device neurons runs its
// gate dense: layers whose hybrid FFN comes out slower than that are taken out (their statistics
// zeroed for the planner, which then spends the bytes elsewhere) until none is left.
Result<PlanResult> plan_pruned(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                               uint64_t budget) {
  PlanInput work = pin;
  PlanResult r;
  for (int iter = 0; iter < 8; ++iter) {
    HC_ASSIGN_OR_RETURN(r, make_plan(work, budget, opt));
    HC_ASSIGN_OR_RETURN(Prediction pr, predict_plan(pin, r.plan));
    bool pruned = false;
    for (int l = 0; l < pin.n_layer(); ++l) {
      LayerPlacement& lp = r.plan.layers[static_cast<size_t>(l)];
      if (lp.hot.empty() || pin.layers[static_cast<size_t>(l)].host_cold_bytes == 0) continue;
      const LayerTime& lt = pr.layers[static_cast<size_t>(l)];
      const double hybrid_s =
          lt.ffn_s + (in.hw.overlap ? 0.0 : std::min(lt.ffn_device_s, lt.ffn_host_s));
      if (host_only_ffn_s(in, opt, pin, l) <= hybrid_s) {
        lp.hot.clear();
        std::fill(work.layers[static_cast<size_t>(l)].fire_prob.begin(),
                  work.layers[static_cast<size_t>(l)].fire_prob.end(), 0.0);
        pruned = true;
      }
    }
    if (!pruned) break;
  }
  return r;
}

// The plan's per-layer capacities refilled with the top-k of p (attention kept).
PlacementPlan refill(const PlacementPlan& plan, const std::vector<std::vector<double>>& p) {
  PlacementPlan out = plan;
  for (size_t l = 0; l < out.layers.size(); ++l) {
    std::vector<int32_t>& hot = out.layers[l].hot;
    const size_t k = hot.size();
    if (k == 0) continue;
    const std::vector<int32_t> order = neurons_by_frequency(p[l]);
    hot.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(hot.begin(), hot.end());
  }
  return out;
}

// Bytes newly placed on the device going from plan a to plan b (units: neurons, or whole
// experts, at what one takes on the device).
double moved_bytes(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                   const PlacementPlan& a, const PlacementPlan& b) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  double bytes = 0;
  for (size_t l = 0; l < b.layers.size(); ++l) {
    const LayerCosts& c = pin.layers[l];
    std::vector<char> was(static_cast<size_t>(m.n_units()), 0);
    for (int32_t i : a.layers[l].hot) was[static_cast<size_t>(i)] = 1;
    int64_t added = 0;
    for (int32_t i : b.layers[l].hot) added += was[static_cast<size_t>(i)] ? 0 : 1;
    const uint64_t unit = c.hot_store_bytes ? c.hot_store_bytes(1) : c.neuron_bytes;
    bytes += static_cast<double>(added) * static_cast<double>(unit);
    if (b.layers[l].attn_on_device && !a.layers[l].attn_on_device)
      bytes += static_cast<double>(m.layers[l].attn + kv);
  }
  return bytes;
}

// The planner's input for either kind of model.
Result<PlanInput> plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                             const SimOptions& opt) {
  return in.model.moe() ? moe_plan_input(in, p, opt) : hybrid_plan_input(in, p, opt);
}

ModeResult dense_cpu_mode(const SimInput& in, const SimOptions& opt) {
  ModeResult dense;
  dense.mode = "dense-cpu";
  dense.s_per_token = dense_seconds(in, opt, 0, false, &dense.device_bytes);
  dense.tok_s = 1.0 / dense.s_per_token;
  return dense;
}

ModeResult dense_offload_mode(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  ModeResult off;
  off.mode = "dense-offload";
  int n_dev = 0;
  bool out_dev = false;
  if (opt.n_gpu_layers >= 0) {
    n_dev = std::min(opt.n_gpu_layers, m.n_layer());
    out_dev = opt.n_gpu_layers > m.n_layer();
  } else {
    dense_layers_that_fit(in, opt, &n_dev, &out_dev);
  }
  off.s_per_token = dense_seconds(in, opt, n_dev, out_dev, &off.device_bytes);
  off.tok_s = 1.0 / off.s_per_token;
  off.layers_on_device = n_dev;
  off.attn_on_device = n_dev;
  off.output_on_device = out_dev;
  off.device_mass = static_cast<double>(n_dev) / m.n_layer();
  off.hot_neurons = static_cast<int64_t>(n_dev) * m.n_units();
  return off;
}

// llama.cpp's -ngl 99 --n-cpu-moe N (layers_on_device: layers with their experts on the device;
// device_mass: the share of layers whose experts the device computes).
ModeResult cpu_moe_mode(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  const CpuMoeSplit sp = cpu_moe_split_that_fits(in, opt);
  ModeResult r;
  r.mode = "llamacpp-cpu-moe";
  r.s_per_token = cpu_moe_seconds(in, opt, sp, &r.device_bytes);
  r.tok_s = 1.0 / r.s_per_token;
  r.attn_on_device = sp.n_gpu_layers;
  r.layers_on_device = std::max(0, std::min(sp.n_gpu_layers, m.n_layer() - sp.n_cpu_moe));
  r.output_on_device = sp.output;
  r.n_cpu_moe = sp.n_cpu_moe;
  r.device_mass = static_cast<double>(r.layers_on_device) / m.n_layer();
  r.hot_neurons = static_cast<int64_t>(r.layers_on_device) * m.n_expert;
  return r;
}

// The static plan (planned on the profile, or given) and where it put the output.
struct StaticPlan {
  PlacementPlan plan;
  bool output = false;
  uint64_t budget = 0;  // what the plan was made for (the budget less the output's)
  ModeResult mode;      // evaluated on the serving distribution
};

Result<StaticPlan> static_mode(const SimInput& in, const SimOptions& opt, const PlanInput& serve_in,
                               const char* name) {
  const ModelBytes& m = in.model;
  StaticPlan sp;
  sp.budget = opt.budget_bytes;
  if (opt.plan) {
    HC_TRY(opt.plan->check_matches(m.n_layer(), m.n_units()).with_context("plan"));
    sp.plan = *opt.plan;
    HC_ASSIGN_OR_RETURN(sp.mode, evaluate(in, opt, serve_in, sp.plan, false, name));
    sp.mode.solver = "file";
    return sp;
  }
  HC_ASSIGN_OR_RETURN(PlanInput prof_in, plan_input(in, in.profile, opt));
  // Output on the host, and (when it fits) on the device with the rest of the budget: the
  // faster on the profile is what an offline planner would pick.
  double best_prof = std::numeric_limits<double>::infinity();
  const uint64_t base = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  std::string solver;
  for (bool o : {false, true}) {
    if (o && (!opt.output_on_device || opt.budget_bytes < base + m.output)) continue;
    const uint64_t budget = o ? opt.budget_bytes - m.output : opt.budget_bytes;
    HC_ASSIGN_OR_RETURN(PlanResult pr, plan_pruned(in, opt, prof_in, budget));
    HC_ASSIGN_OR_RETURN(ModeResult on_prof, evaluate(in, opt, prof_in, pr.plan, o, name));
    if (on_prof.s_per_token < best_prof) {
      best_prof = on_prof.s_per_token;
      sp.plan = pr.plan;
      sp.output = o;
      sp.budget = budget;
      solver = pr.solver;
    }
  }
  HC_ASSIGN_OR_RETURN(sp.mode, evaluate(in, opt, serve_in, sp.plan, sp.output, name));
  sp.mode.solver = solver;
  return sp;
}

// Planned on the serving distribution, or the static capacities refilled with the serving top-k
// when that is faster (so never slower than static before migration); plus the newly placed
// bytes over the link, amortised over the drift period.
Result<ModeResult> dynamic_mode(const SimInput& in, const SimOptions& opt,
                                const PlanInput& serve_in,
                                const std::vector<std::vector<double>>& serve,
                                const StaticPlan& st) {
  const PlacementPlan refilled = refill(st.plan, serve);
  HC_ASSIGN_OR_RETURN(PlanResult dp, plan_pruned(in, opt, serve_in, st.budget));
  HC_ASSIGN_OR_RETURN(ModeResult dy, evaluate(in, opt, serve_in, dp.plan, st.output, "dynamic"));
  dy.solver = dp.solver;
  const PlacementPlan* dyn_plan = &dp.plan;
  HC_ASSIGN_OR_RETURN(ModeResult dr, evaluate(in, opt, serve_in, refilled, st.output, "dynamic"));
  if (dr.s_per_token < dy.s_per_token) {
    dy = dr;
    dy.solver = "refill";
    dyn_plan = &refilled;
  }
  dy.migration_bytes_per_token =
      moved_bytes(in, opt, serve_in, st.plan, *dyn_plan) / opt.drift_period_tokens;
  dy.migration_s = dy.migration_bytes_per_token / (in.hw.link_gbps * kGB);
  dy.s_per_token += dy.migration_s;
  dy.tok_s = 1.0 / dy.s_per_token;
  return dy;
}

}  // namespace

Result<SimResult> simulate(const SimInput& in, const SimOptions& opt_in) {
  HC_TRY(validate_input(in));
  HC_TRY(validate_options(opt_in));
  const ModelBytes& m = in.model;
  SimOptions opt = opt_in;
  if (m.moe()) opt.granule = 1;  // an expert is one placement unit
  SimResult res;
  const std::vector<std::vector<double>> serve =
      drift_firing(in.profile, opt.drift, opt.drift_seed);
  for (const auto& p : in.profile) {
    res.firing_share += mean_firing(p) / m.n_layer();
    res.cover80 += neurons_covering(p, 0.8) / m.n_layer();
  }
  res.top20_overlap = top_overlap(in.profile, serve, 0.2);

  res.modes.push_back(dense_cpu_mode(in, opt));
  HC_ASSIGN_OR_RETURN(PlanInput serve_in, plan_input(in, serve, opt));
  if (!m.moe() || in.expert_firing < 1) {  // dense experts: the same as dense-cpu
    HC_ASSIGN_OR_RETURN(
        ModeResult sparse_cpu,
        evaluate(in, opt, serve_in, empty_plan(m.n_layer(), m.n_units()), false, "sparse-cpu"));
    res.modes.push_back(sparse_cpu);
  }
  if (!in.hw.has_device) return res;
  res.modes.push_back(dense_offload_mode(in, opt));
  if (m.moe()) res.modes.push_back(cpu_moe_mode(in, opt));
  HC_ASSIGN_OR_RETURN(StaticPlan st,
                      static_mode(in, opt, serve_in, m.moe() ? "hot-experts" : "static"));
  res.modes.push_back(st.mode);
  HC_ASSIGN_OR_RETURN(ModeResult dy, dynamic_mode(in, opt, serve_in, serve, st));
  res.modes.push_back(dy);
  return res;
}

}  // namespace hc::sparse
