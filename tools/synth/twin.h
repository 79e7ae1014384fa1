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
// The twins' targets and each layer's p_i: perfmodel/twin_profile.h (hotcold simulate --twin
// projects the same statistics onto larger shapes).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "perfmodel/twin_profile.h"

namespace hc::synth {

using perfmodel::find_twin;
using perfmodel::kTwins;
using perfmodel::twin_names;
using perfmodel::twin_probabilities;
using perfmodel::twin_top80;
using perfmodel::TwinSpec;

inline constexpr int kTwinPasses = 4;
// Calibration reads its text in chunks of this many tokens, each from an empty cache.
inline constexpr int kTwinChunk = 256;
// The constant channel: the first kTwinChannel dimensions (one quantisation block, so that a
// gate row's bias, repeated there, and the embeddings' constant are stored exactly in every
// weight type).
inline constexpr int kTwinChannel = 32;

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
