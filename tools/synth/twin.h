// Statistical twins (hc-synth-model --twin NAME, issue 35): a real model's shape whose ReLU-family
// FFN fires as published profiles of that model family say, so that the hot/cold split has the
// power law it exists for (random weights fire about half their neurons uniformly).
//
// How a random-weight llama file is made to fire so. Dimension 0 of the residual stream is a
// constant channel (its first kTwinChannel dimensions): every token embedding holds c there
// and no layer writes it (those rows of attn_output and ffn_down are zero), so after RMSNorm
// the FFN input has s_t = the channel's sum > 0, about the same for every token. The channel
// columns of neuron i's gate row all hold its bias a_i: its gate is a_i s_t + z_it (z_it the
// rest of the dot product), so it fires for token t when a_i > -z_it / s_t. Calibration runs the model itself (hotcold's forward pass, on text given
// with --calib) and sets each a_i to the p_i-quantile of -z_it / s_t over the text's tokens:
// neuron i then fires for a share p_i of them. Changing one layer's firing changes what later
// layers see, so the model is written and calibrated a few times (kTwinPasses), every layer at
// once, then written a last time.
//
// The p_i of a layer: neurons in a seeded random order get p = min(0.995, A (1 - u)^g) at
// u = (k + 1/2) / n_ff, A and g solved so that the layer fires `firing` of its neurons per token
// on average and the most frequent `top80` of its neurons cover 80% of its firings (what
// `hotcold profile` reports as firing and top80%).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc::synth {

struct TwinSpec {
  const char* name;
  const char* shape;  // a kShapes name
  const char* arch;   // llama or bamboo
  const char* act;    // relu or drelu
  double firing;      // mean share of a layer's neurons firing per token (1 - sparsity)
  double top80_ends;  // share of neurons covering 80% of the firings: first and last layer
  double top80_mid;   // ... and the middle layer (a parabola over depth between them)
  const char* source;  // where the numbers come from (or that they are an assumption)
};

inline constexpr TwinSpec kTwins[] = {
    {"relullama-7b", "llama2-7b", "llama", "relu", 0.33, 0.72, 0.41,
     "ReluLLaMA-7B as PowerInfer's shipped profiles show it: ~67% sparsity, 80% of the firings "
     "from 41-72% of a layer's neurons, U-shaped over depth"},
    {"prosparse-7b", "llama2-7b", "llama", "relu", 0.11, 0.30, 0.30,
     "ProSparse-LLaMA-2-7B: 89% sparsity; 30% of the neurons covering 80% is an assumption "
     "(the issue asks <= 35%)"},
    {"opt-like-7b", "llama2-7b", "llama", "relu", 0.03, 0.26, 0.26,
     "OPT-30B's statistics in LLaMA-2-7B's shape: 97% sparsity, 26% covering 80%"},
    {"bamboo-7b", "mistral-7b", "bamboo", "drelu", 0.10, 0.30, 0.30,
     "Bamboo-7B (Mistral-7B shape, dReLU): 90% sparsity of the gate; 30% covering 80% is an "
     "assumption"},
};
inline constexpr int kTwinPasses = 4;
// Calibration reads its text in chunks of this many tokens, each from an empty cache.
inline constexpr int kTwinChunk = 256;
// The constant channel: the first kTwinChannel dimensions (one quantisation block, so that a
// gate row's bias, repeated there, and the embeddings' constant are stored exactly in every
// weight type).
inline constexpr int kTwinChannel = 32;

const TwinSpec* find_twin(const std::string& name);
std::string twin_names();

// Layer il's targets (of n_layer): mean firing and the share covering 80%.
double twin_top80(const TwinSpec& t, int il, int n_layer);

// The n firing probabilities of one layer (neuron order: a permutation seeded by `seed`),
// with the given mean and share of neurons covering 80% of the firings.
std::vector<float> twin_probabilities(int64_t n, double firing, double top80, uint64_t seed);

// The share of neurons (most frequent first) covering `mass` of the firings, for firing counts
// or probabilities p.
double covering_share(std::vector<double> p, double mass);

// What the calibration measured in one layer, on its text.
struct TwinLayerStats {
  double firing = 0, top80 = 0;
};

// One calibration pass over the model file at `path` (written with the current biases): for
// every layer, bias[il][i] becomes the p[il][i]-quantile of -z / s over the text's tokens (see
// above); returns what the layers did with the biases they had. `tokens_max` caps the text.
Result<std::vector<TwinLayerStats>> calibrate_twin(const std::string& path,
                                                   const std::string& text, int tokens_max,
                                                   int threads,
                                                   const std::vector<std::vector<float>>& p,
                                                   std::vector<std::vector<float>>* bias);

}  // namespace hc::synth
