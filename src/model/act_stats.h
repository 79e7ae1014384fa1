// Activation statistics of a model's FFN neurons over a corpus (hotcold profile): per layer and
// neuron how often it fires and the sum of |act|, and per layer a histogram of |act| over all
// neurons and tokens, from which firing thresholds for any target sparsity are calibrated.
//
// act = act(gate . x) (ReLU or SiLU, before the product with up), as FfnObserver sees it.
// A neuron fires for a token when |act| > threshold[il]: 0 for ReLU models (exact zeros),
// calibrated from the histogram for SiLU models (CATS).
//
// Histogram layout (n_bins bins over |act|, bpd bins per decade from hist_min):
//   bin 0                  |act| == 0 exactly
//   bin 1                  0 < |act| < hist_min
//   bin 2 + k              hist_min * 10^(k / bpd) <= |act| < hist_min * 10^((k + 1) / bpd),
//                          k in [0, n_bins - 3)
//   bin n_bins - 1         |act| >= hist_min * 10^((n_bins - 3) / bpd), and NaN
// The defaults (1e-6, 100 per decade up to 1e3) resolve a threshold to 2.3% of its value.
//
// Mixture-of-experts models: the neurons are those of every expert, expert-major (neuron
// e * n_ff_expert + i is neuron i of expert e; n_ff = n_expert * n_ff_expert), seen only for the
// tokens routed to their expert (FfnObserver::on_expert_activation), so a neuron's firing count
// includes its expert's routing; and per layer and expert the tokens routed to it
// (on_moe_routing: each token counts once for each of its n_expert_used experts).
//
// The file (GGUF, general.architecture = "hotcold-stats") is described in docs/ARCHITECTURE.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/ffn_observer.h"
#include "model/llama_model.h"

namespace hc {

class ActStats : public FfnObserver {
 public:
  static constexpr double kDefaultHistMin = 1e-6;
  static constexpr int kDefaultBinsPerDecade = 100;
  static constexpr int kDefaultHistBins = 2 + 9 * kDefaultBinsPerDecade + 1;  // 1e-6 .. 1e3

  // n_expert > 0: a mixture-of-experts model, n_ff = n_expert * the experts' width.
  ActStats(int n_layer, int64_t n_ff, FfnActivation act, int n_expert = 0);

  // Firing thresholds on |act| for counting, one per layer (0 = exact ReLU, the default).
  void set_thresholds(std::vector<float> per_layer);
  // The histogram is always recorded; firing counts and |act| sums only while counting is on
  // (the default), so a calibration pass can fill the histogram alone.
  void set_counting(bool on);
  // The sparsity the thresholds were calibrated for (0 for exact ReLU); stored in the file.
  void set_sparsity_target(float s) { sparsity_target_ = s; }

  // Called on the forward pass's thread; not thread-safe (one session per ActStats).
  void on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) override;
  void on_moe_routing(int il, const int32_t* experts, int64_t n_tok, int k) override;
  void on_expert_activation(int il, int expert, const float* act, int64_t n_rows,
                            int64_t n_ff) override;

  int n_layer() const { return n_layer_; }
  int64_t n_ff() const { return n_ff_; }
  int n_expert() const { return n_expert_; }  // 0: a dense FFN
  // [n_expert] tokens routed to each expert of layer il (over n_tokens() tokens).
  const std::vector<float>& expert_count(int il) const {
    return expert_f_[static_cast<size_t>(il)];
  }
  // Share of experts (most routed first) covering `mass` of layer il's routings.
  double experts_covering(int il, double mass) const;
  FfnActivation activation() const { return act_; }
  // Tokens whose firings were counted (the denominator of fire_count and act_abs_sum).
  uint64_t n_tokens() const { return n_tokens_; }
  // Tokens recorded in the histogram (counted or not).
  uint64_t n_tokens_hist() const { return n_tokens_hist_; }
  float sparsity_target() const { return sparsity_target_; }
  const std::vector<float>& thresholds() const { return thresholds_; }
  float threshold(int il) const { return thresholds_[static_cast<size_t>(il)]; }

  // [n_ff] per neuron: tokens on which it fired; sum of |act| over the counted tokens.
  const std::vector<float>& fire_count(int il) const { return fire_f_[static_cast<size_t>(il)]; }
  const std::vector<float>& act_abs_sum(int il) const {
    return abs_sum_f_[static_cast<size_t>(il)];
  }
  // [n_bins] counts of |act| per histogram bin (layout above).
  const std::vector<double>& act_hist(int il) const { return hist_[static_cast<size_t>(il)]; }
  double hist_min() const { return hist_min_; }
  int hist_bins_per_decade() const { return bins_per_decade_; }
  int hist_n_bins() const { return n_bins_; }
  // The histogram bin of one |act| value, and bin b's lower / upper edge (b >= 1).
  int bin_of(float abs_act) const;
  double bin_lower(int b) const;
  double bin_upper(int b) const;

  // Per-layer thresholds t_l such that a share `sparsity` of the recorded |activations| of
  // layer l is <= t_l (interpolated within a histogram bin, geometrically in the log bins;
  // 0 when the exact zeros alone reach the share).
  std::vector<float> thresholds_for_sparsity(double sparsity) const;
  // Share of neurons (most frequent first) covering `mass` of layer il's firings: the smallest
  // k / n_ff such that the k most frequent neurons fire at least mass * (all firings).
  double neurons_covering(int il, double mass) const;
  // Mean share of layer il's neurons that fire per counted token.
  double firing_share(int il) const;

  // Writes the statistics as a GGUF file at `path` (directly; callers wanting atomic
  // replacement write to a temporary path and rename).
  Status write(const std::string& path, const std::string& model_name,
               const std::string& corpus) const;
  // Reads a file written by write(); errors name the file and what was expected and found.
  static Result<ActStats> read(const std::string& path);
  // The model and corpus a file read by read() was recorded on ("" otherwise).
  const std::string& model_name() const { return model_name_; }
  const std::string& corpus() const { return corpus_; }

  // Ok when these statistics were recorded on a model with hp's n_layer, n_ff and activation.
  Status check_matches(const LlamaHParams& hp) const;

 private:
  void set_hist_layout(double hist_min, int bins_per_decade, int n_bins);
  static Result<ActStats> from_gguf(const GgufFile& g);
  // The histogram, firing counts and |act| sums of n_tok rows of n neurons from `first` on.
  void record(int il, const float* act, int64_t n_tok, int64_t n, int64_t first);
  void count_tokens(int il, int64_t n_tok);

  int n_layer_;
  int64_t n_ff_;
  FfnActivation act_;
  int n_expert_ = 0;
  std::vector<std::vector<uint64_t>> expert_n_;  // [n_layer][n_expert] routings
  std::vector<std::vector<float>> expert_f_;     // the same as float
  std::vector<float> thresholds_;  // [n_layer]
  bool counting_ = true;
  float sparsity_target_ = 0.0f;
  uint64_t n_tokens_ = 0, n_tokens_hist_ = 0;
  // Exact accumulators, and float copies kept in step for the accessors and the file.
  std::vector<std::vector<uint64_t>> fire_n_;  // [n_layer][n_ff]
  std::vector<std::vector<double>> abs_sum_;   // [n_layer][n_ff]
  std::vector<std::vector<float>> fire_f_;     // [n_layer][n_ff]
  std::vector<std::vector<float>> abs_sum_f_;  // [n_layer][n_ff]
  std::vector<std::vector<double>> hist_;      // [n_layer][n_bins]
  double hist_min_ = kDefaultHistMin;
  int bins_per_decade_ = kDefaultBinsPerDecade;
  int n_bins_ = kDefaultHistBins;
  std::vector<float> edges_;  // [n_bins - 2]: edges_[k] = lower edge of bin 2 + k, then the top
  float log2_min_ = 0, bins_per_log2_ = 0;  // bin_of's first guess: (log2 a - log2_min) * this
  std::vector<uint64_t> call_hist_;         // [n_bins] one call's counts
  std::string model_name_, corpus_;
};

}  // namespace hc
