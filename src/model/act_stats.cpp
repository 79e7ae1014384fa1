#include "model/act_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/mmap.h"
#include "format/gguf.h"
#include "model/hot_set.h"

namespace hc {

namespace {

constexpr char kArch[] = "hotcold-stats";
constexpr uint32_t kVersion = 1;

// log2(a) to within 0.008 (the exponent, and log2 of the mantissa 1 + x as the quadratic
// x + 0.3466 x (1 - x)): enough to land within a bin, which bin_of corrects against the edges.
inline float rough_log2(float a) {
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  const int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  const float x = static_cast<float>(bits & 0x7fffff) * (1.0f / 8388608.0f);
  return static_cast<float>(e) + x + 0.34655523f * x * (1.0f - x);
}

std::string layer_tensor(int il, const char* what) {
  return "blk." + std::to_string(il) + "." + what;
}

}  // namespace

ActStats::ActStats(int n_layer, int64_t n_ff, FfnActivation act, int n_expert)
    : n_layer_(n_layer), n_ff_(n_ff), act_(act), n_expert_(n_expert) {
  HC_CHECK(n_layer > 0 && n_ff > 0 && n_expert >= 0 && (n_expert == 0 || n_ff % n_expert == 0));
  expert_n_.assign(static_cast<size_t>(n_layer), std::vector<uint64_t>(static_cast<size_t>(n_expert), 0));
  expert_f_.assign(static_cast<size_t>(n_layer), std::vector<float>(static_cast<size_t>(n_expert), 0.0f));
  const auto L = static_cast<size_t>(n_layer);
  const auto F = static_cast<size_t>(n_ff);
  thresholds_.assign(L, 0.0f);
  fire_n_.assign(L, std::vector<uint64_t>(F, 0));
  abs_sum_.assign(L, std::vector<double>(F, 0.0));
  fire_f_.assign(L, std::vector<float>(F, 0.0f));
  abs_sum_f_.assign(L, std::vector<float>(F, 0.0f));
  set_hist_layout(kDefaultHistMin, kDefaultBinsPerDecade, kDefaultHistBins);
}

void ActStats::set_hist_layout(double hist_min, int bins_per_decade, int n_bins) {
  HC_CHECK(hist_min > 0 && bins_per_decade > 0 && n_bins >= 3);
  // The file stores hist_min as f32: use that value here too, so edges survive a round trip.
  hist_min_ = static_cast<double>(static_cast<float>(hist_min));
  bins_per_decade_ = bins_per_decade;
  n_bins_ = n_bins;
  const int n_log = n_bins - 3;
  edges_.resize(static_cast<size_t>(n_log) + 1);
  for (int k = 0; k <= n_log; ++k)
    edges_[static_cast<size_t>(k)] =
        static_cast<float>(hist_min_ * std::pow(10.0, static_cast<double>(k) / bins_per_decade));
  log2_min_ = static_cast<float>(std::log2(static_cast<double>(edges_[0])));
  bins_per_log2_ = static_cast<float>(bins_per_decade / std::log2(10.0));
  hist_.assign(static_cast<size_t>(n_layer_),
               std::vector<double>(static_cast<size_t>(n_bins), 0.0));
  call_hist_.assign(static_cast<size_t>(n_bins), 0);
}

void ActStats::set_thresholds(std::vector<float> per_layer) {
  HC_CHECK(per_layer.size() == static_cast<size_t>(n_layer_));
  thresholds_ = std::move(per_layer);
}

void ActStats::set_counting(bool on) { counting_ = on; }

int ActStats::bin_of(float a) const {
  if (a == 0.0f) return 0;
  const int n_log = n_bins_ - 3;
  if (!(a < edges_.back())) return n_bins_ - 1;  // overflow, +inf and NaN
  if (a < edges_[0]) return 1;
  int k = static_cast<int>((rough_log2(a) - log2_min_) * bins_per_log2_);
  k = std::clamp(k, 0, n_log - 1);
  // The guess is within a bin at the default resolution: one branch-free step each way, then
  // loops that only finer layouts need.
  k -= a < edges_[static_cast<size_t>(k)] ? 1 : 0;
  k += a >= edges_[static_cast<size_t>(k) + 1] ? 1 : 0;
  while (a < edges_[static_cast<size_t>(k)]) --k;
  while (a >= edges_[static_cast<size_t>(k) + 1]) ++k;
  return 2 + k;
}

double ActStats::bin_lower(int b) const {
  HC_CHECK(b >= 1 && b < n_bins_);
  return b == 1 ? 0.0 : static_cast<double>(edges_[static_cast<size_t>(b - 2)]);
}

double ActStats::bin_upper(int b) const {
  HC_CHECK(b >= 1 && b < n_bins_);
  return b == n_bins_ - 1 ? INFINITY : static_cast<double>(edges_[static_cast<size_t>(b - 1)]);
}

void ActStats::count_tokens(int il, int64_t n_tok) {
  if (il != 0) return;  // every forward call visits layer 0 once with all its tokens
  n_tokens_hist_ += static_cast<uint64_t>(n_tok);
  if (counting_) n_tokens_ += static_cast<uint64_t>(n_tok);
}

void ActStats::on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) {
  HC_CHECK(il >= 0 && il < n_layer_ && n_ff == n_ff_ && n_tok >= 0 && n_expert_ == 0);
  count_tokens(il, n_tok);
  record(il, act, n_tok, n_ff, 0);
}

void ActStats::on_moe_routing(int il, const int32_t* experts, int64_t n_tok, int k) {
  HC_CHECK(il >= 0 && il < n_layer_ && n_expert_ > 0 && n_tok >= 0 && k > 0);
  count_tokens(il, n_tok);
  if (!counting_) return;
  std::vector<uint64_t>& c = expert_n_[static_cast<size_t>(il)];
  for (int64_t j = 0; j < n_tok * k; ++j) {
    HC_CHECK(experts[j] >= 0 && experts[j] < n_expert_);
    ++c[static_cast<size_t>(experts[j])];
  }
  for (int e = 0; e < n_expert_; ++e)
    expert_f_[static_cast<size_t>(il)][static_cast<size_t>(e)] =
        static_cast<float>(c[static_cast<size_t>(e)]);
}

void ActStats::on_expert_activation(int il, int expert, const float* act, int64_t n_rows,
                                    int64_t n_ff) {
  HC_CHECK(il >= 0 && il < n_layer_ && n_expert_ > 0 && expert >= 0 && expert < n_expert_ &&
           n_ff * n_expert_ == n_ff_ && n_rows >= 0);
  record(il, act, n_rows, n_ff, int64_t{expert} * n_ff);
}

void ActStats::record(int il, const float* act, int64_t n_tok, int64_t n, int64_t first) {
  const auto l = static_cast<size_t>(il);
  // Counted in integers per call, then added: a double += 1 per element would serialise on
  // the add's latency whenever neighbouring values share a bin.
  std::fill(call_hist_.begin(), call_hist_.end(), 0);
  uint64_t* hist = call_hist_.data();
  const float thr = thresholds_[l];
  uint64_t* fired = fire_n_[l].data() + first;
  double* sum = abs_sum_[l].data() + first;
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* row = act + t * n;  // [n] one token
    if (counting_) {
      for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(row[i]);
        ++hist[bin_of(a)];
        sum[i] += a;
        fired[i] += a > thr ? 1 : 0;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) ++hist[bin_of(std::fabs(row[i]))];
    }
  }
  std::vector<double>& layer_hist = hist_[l];
  for (size_t b = 0; b < call_hist_.size(); ++b)
    layer_hist[b] += static_cast<double>(call_hist_[b]);
  if (counting_) {
    for (int64_t i = 0; i < n; ++i) {
      fire_f_[l][static_cast<size_t>(first + i)] = static_cast<float>(fired[i]);
      abs_sum_f_[l][static_cast<size_t>(first + i)] = static_cast<float>(sum[i]);
    }
  }
}

std::vector<float> ActStats::thresholds_for_sparsity(double sparsity) const {
  sparsity = std::clamp(sparsity, 0.0, 1.0);
  std::vector<float> out(static_cast<size_t>(n_layer_), 0.0f);
  for (int il = 0; il < n_layer_; ++il) {
    const std::vector<double>& h = hist_[static_cast<size_t>(il)];
    const double total = std::accumulate(h.begin(), h.end(), 0.0);
    const double target = sparsity * total;
    if (total <= 0 || h[0] >= target) continue;  // the exact zeros reach the share: 0
    double cum = h[0];
    double t = edges_.back();  // rounding left target above the last bin: its lower edge
    for (int b = 1; b < n_bins_; ++b) {
      const double hb = h[static_cast<size_t>(b)];
      if (hb > 0 && cum + hb >= target) {
        const double frac = (target - cum) / hb;
        if (b == 1)
          t = frac * bin_upper(1);  // (0, hist_min): linear
        else if (b == n_bins_ - 1)
          t = bin_lower(b);  // unbounded: its lower edge
        else
          t = bin_lower(b) * std::pow(bin_upper(b) / bin_lower(b), frac);  // log-spaced
        break;
      }
      cum += hb;
    }
    out[static_cast<size_t>(il)] = static_cast<float>(t);
  }
  return out;
}

namespace {

// Share of the units (most counted first) whose counts cover `mass` of the total: the size of
// their hot set over n (0 when nothing counted).
double units_covering(const std::vector<uint64_t>& c, double mass) {
  if (c.empty()) return 0.0;
  return static_cast<double>(hot_set(c, mass).size()) / static_cast<double>(c.size());
}

}  // namespace

double ActStats::neurons_covering(int il, double mass) const {
  return units_covering(fire_n_[static_cast<size_t>(il)], mass);
}

double ActStats::experts_covering(int il, double mass) const {
  return n_expert_ == 0 ? 0.0 : units_covering(expert_n_[static_cast<size_t>(il)], mass);
}

double ActStats::firing_share(int il) const {
  if (n_tokens_ == 0) return 0.0;
  const std::vector<uint64_t>& c = fire_n_[static_cast<size_t>(il)];
  const double fired = static_cast<double>(std::accumulate(c.begin(), c.end(), uint64_t{0}));
  return fired / (static_cast<double>(n_tokens_) * static_cast<double>(n_ff_));
}

Status ActStats::write(const std::string& path, const std::string& model_name,
                       const std::string& corpus) const {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(kArch));
  w.set("hotcold.stats.version", GgufValue::u32(kVersion));
  w.set("hotcold.stats.model", GgufValue::str(model_name));
  w.set("hotcold.stats.n_layer", GgufValue::u32(static_cast<uint32_t>(n_layer_)));
  w.set("hotcold.stats.n_ff", GgufValue::u32(static_cast<uint32_t>(n_ff_)));
  w.set("hotcold.stats.n_tokens", GgufValue::u64(n_tokens_));
  w.set("hotcold.stats.n_tokens_hist", GgufValue::u64(n_tokens_hist_));
  w.set("hotcold.stats.activation", GgufValue::str(activation_name(act_)));
  w.set("hotcold.stats.corpus", GgufValue::str(corpus));
  w.set("hotcold.stats.sparsity_target", GgufValue::f32(sparsity_target_));
  w.set("hotcold.stats.hist_min", GgufValue::f32(static_cast<float>(hist_min_)));
  w.set("hotcold.stats.hist_bins_per_decade",
        GgufValue::u32(static_cast<uint32_t>(bins_per_decade_)));
  w.set("hotcold.stats.hist_n_bins", GgufValue::u32(static_cast<uint32_t>(n_bins_)));
  if (n_expert_ > 0) w.set("hotcold.stats.n_expert", GgufValue::u32(static_cast<uint32_t>(n_expert_)));
  std::vector<std::vector<float>> hist_f(static_cast<size_t>(n_layer_));  // [n_layer][n_bins]
  auto bytes = [](const float* p, size_t n) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p), n * sizeof(float));
  };
  const auto F = static_cast<size_t>(n_ff_);
  for (int il = 0; il < n_layer_; ++il) {
    const auto l = static_cast<size_t>(il);
    hist_f[l].assign(hist_[l].begin(), hist_[l].end());
    w.add_tensor(
        {layer_tensor(il, "fire_count"), {n_ff_}, GgmlType::F32, bytes(fire_f_[l].data(), F)});
    w.add_tensor(
        {layer_tensor(il, "act_abs_sum"), {n_ff_}, GgmlType::F32, bytes(abs_sum_f_[l].data(), F)});
    w.add_tensor({layer_tensor(il, "act_hist"),
                  {n_bins_},
                  GgmlType::F32,
                  bytes(hist_f[l].data(), hist_f[l].size())});
    w.add_tensor({layer_tensor(il, "threshold"), {1}, GgmlType::F32, bytes(&thresholds_[l], 1)});
    if (n_expert_ > 0)
      w.add_tensor({layer_tensor(il, "expert_count"),
                    {n_expert_},
                    GgmlType::F32,
                    bytes(expert_f_[l].data(), expert_f_[l].size())});
  }
  return w.write_file(path);
}

namespace {

// Copies a F32 tensor of exactly `n` elements into out, checking every value is finite and
// within [0, max_value].
Status read_f32(const GgufFile& g, const std::string& name, int64_t n, double max_value,
                float* out) {
  const GgufTensorInfo* t = g.find_tensor(name);
  if (t == nullptr) return Status::Error("missing tensor '" + name + "'");
  if (t->type != GgmlType::F32 || t->ne != std::vector<int64_t>{n}) {
    std::string shape = "[";
    for (size_t k = 0; k < t->ne.size(); ++k) shape += (k ? ", " : "") + std::to_string(t->ne[k]);
    return Status::Error("tensor '" + name + "': expected F32 [" + std::to_string(n) + "], found " +
                         dtype_name(t->type) + " " + shape + "]");
  }
  std::memcpy(out, t->data, static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i]) || out[i] < 0 || out[i] > max_value)
      return Status::Error("tensor '" + name + "': element " + std::to_string(i) + " is " +
                           std::to_string(out[i]) + ", expected a value in [0, " +
                           std::to_string(max_value) + "]");
  }
  return Status::Ok();
}

}  // namespace

Result<ActStats> ActStats::from_gguf(const GgufFile& g) {
  const GgufValue* arch = g.find("general.architecture");
  const std::string* arch_s =
      arch && arch->type == GgufType::STRING ? std::get_if<std::string>(&arch->scalar) : nullptr;
  if (arch_s == nullptr || *arch_s != kArch)
    return Status::Error(std::string("not a hotcold statistics file: general.architecture is ") +
                         (arch_s ? "'" + *arch_s + "'" : std::string("missing")) + ", expected '" +
                         kArch + "' (written by hotcold profile)");
  HC_ASSIGN_OR_RETURN(uint32_t version, g.get_u32("hotcold.stats.version"));
  if (version != kVersion)
    return Status::Error("hotcold.stats.version is " + std::to_string(version) +
                         ", this build reads version " + std::to_string(kVersion));
  HC_ASSIGN_OR_RETURN(uint32_t n_layer, g.get_u32("hotcold.stats.n_layer"));
  HC_ASSIGN_OR_RETURN(uint32_t n_ff, g.get_u32("hotcold.stats.n_ff"));
  if (n_layer < 1 || n_layer > 65536 || n_ff < 1 || n_ff > (1u << 24))
    return Status::Error("implausible shape: n_layer " + std::to_string(n_layer) + ", n_ff " +
                         std::to_string(n_ff));
  HC_ASSIGN_OR_RETURN(std::string act_s, g.get_string("hotcold.stats.activation"));
  if (act_s != "relu" && act_s != "silu" && act_s != "drelu" && act_s != "gelu")
    return Status::Error("hotcold.stats.activation is '" + act_s +
                         "', expected 'relu', 'drelu', 'silu' or 'gelu'");
  HC_ASSIGN_OR_RETURN(uint32_t n_expert, g.get_u32_or("hotcold.stats.n_expert", 0));
  if (n_expert > 512 || (n_expert > 0 && n_ff % n_expert != 0))
    return Status::Error("hotcold.stats.n_expert is " + std::to_string(n_expert) +
                         ", expected at most 512 and a divisor of n_ff " + std::to_string(n_ff));
  HC_ASSIGN_OR_RETURN(uint64_t n_tokens, g.get_u64("hotcold.stats.n_tokens"));
  uint64_t n_tokens_hist = n_tokens;
  if (g.find("hotcold.stats.n_tokens_hist")) {
    HC_ASSIGN_OR_RETURN(n_tokens_hist, g.get_u64("hotcold.stats.n_tokens_hist"));
  }
  HC_ASSIGN_OR_RETURN(float hist_min, g.get_f32("hotcold.stats.hist_min"));
  HC_ASSIGN_OR_RETURN(uint32_t bpd, g.get_u32("hotcold.stats.hist_bins_per_decade"));
  HC_ASSIGN_OR_RETURN(uint32_t n_bins, g.get_u32("hotcold.stats.hist_n_bins"));
  if (!(hist_min > 0) || !std::isfinite(hist_min) || bpd < 1 || bpd > 10000 || n_bins < 3 ||
      n_bins > (1u << 20))
    return Status::Error("bad histogram layout: hist_min " + std::to_string(hist_min) +
                         ", bins_per_decade " + std::to_string(bpd) + ", n_bins " +
                         std::to_string(n_bins));
  HC_ASSIGN_OR_RETURN(float sparsity, g.get_f32_or("hotcold.stats.sparsity_target", 0.0f));

  ActStats s(static_cast<int>(n_layer), n_ff,
             act_s == "relu"    ? FfnActivation::kRelu
             : act_s == "drelu" ? FfnActivation::kDRelu
             : act_s == "gelu"  ? FfnActivation::kGelu
                                : FfnActivation::kSilu,
             static_cast<int>(n_expert));
  s.set_hist_layout(hist_min, static_cast<int>(bpd), static_cast<int>(n_bins));
  s.set_sparsity_target(sparsity);
  s.n_tokens_ = n_tokens;
  s.n_tokens_hist_ = n_tokens_hist;
  if (g.find("hotcold.stats.model")) {
    HC_ASSIGN_OR_RETURN(s.model_name_, g.get_string("hotcold.stats.model"));
  }
  if (g.find("hotcold.stats.corpus")) {
    HC_ASSIGN_OR_RETURN(s.corpus_, g.get_string("hotcold.stats.corpus"));
  }
  const double big = 3.4e38;
  std::vector<float> hist_f(n_bins);
  for (int il = 0; il < static_cast<int>(n_layer); ++il) {
    const auto l = static_cast<size_t>(il);
    HC_TRY(read_f32(g, layer_tensor(il, "fire_count"), n_ff, static_cast<double>(n_tokens),
                    s.fire_f_[l].data()));
    HC_TRY(read_f32(g, layer_tensor(il, "act_abs_sum"), n_ff, big, s.abs_sum_f_[l].data()));
    HC_TRY(read_f32(g, layer_tensor(il, "act_hist"), n_bins, big, hist_f.data()));
    HC_TRY(read_f32(g, layer_tensor(il, "threshold"), 1, big, &s.thresholds_[l]));
    if (n_expert > 0) {
      // Each token routes to at most every expert once: a count is at most n_tokens.
      HC_TRY(read_f32(g, layer_tensor(il, "expert_count"), n_expert,
                      static_cast<double>(n_tokens), s.expert_f_[l].data()));
      for (size_t e = 0; e < n_expert; ++e)
        s.expert_n_[l][e] = static_cast<uint64_t>(std::llround(s.expert_f_[l][e]));
    }
    for (size_t i = 0; i < s.fire_f_[l].size(); ++i) {
      s.fire_n_[l][i] = static_cast<uint64_t>(std::llround(s.fire_f_[l][i]));
      s.abs_sum_[l][i] = s.abs_sum_f_[l][i];
    }
    s.hist_[l].assign(hist_f.begin(), hist_f.end());
  }
  return s;
}

Result<ActStats> ActStats::read(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file.ok()) return file.status();
  auto g = parse_gguf(file->bytes());
  if (!g.ok()) return g.status().with_context("'" + path + "'");
  auto s = from_gguf(*g);
  if (!s.ok()) return s.status().with_context("'" + path + "'");
  return s;
}

Status ActStats::check_matches(const LlamaHParams& hp) const {
  const std::string from = model_name_.empty() ? "" : " (recorded on '" + model_name_ + "')";
  if (hp.n_expert != n_expert_)
    return Status::Error("activation statistics" + from + " are for " +
                         std::to_string(n_expert_) + " experts per layer; this model has " +
                         std::to_string(hp.n_expert));
  if (hp.n_layer != n_layer_ || int64_t{hp.n_ff} * std::max(hp.n_expert, 1) != n_ff_)
    return Status::Error("activation statistics" + from + " are for n_layer " +
                         std::to_string(n_layer_) + ", n_ff " + std::to_string(n_ff_) +
                         "; this model has n_layer " + std::to_string(hp.n_layer) + ", n_ff " +
                         std::to_string(int64_t{hp.n_ff} * std::max(hp.n_expert, 1)));
  if (hp.ffn_act != act_)
    return Status::Error("activation statistics" + from + " were recorded with " +
                         activation_name(act_) + " activations; this model uses " +
                         activation_name(hp.ffn_act));
  return Status::Ok();
}

}  // namespace hc
