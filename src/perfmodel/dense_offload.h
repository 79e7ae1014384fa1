// Whole-layer dense offload (llama.cpp's -ngl): the trailing layers with their KV on the device,
// host and device one after the other.
#pragma once
#include <cstdint>

#include "perfmodel/sim_input.h"

namespace hc::perfmodel {

// Seconds per token of the dense model with its last n_dev layers on the device (0: host only);
// output_dev puts the output matrix there too. Device bytes in *device_bytes when not null.
double dense_seconds(const SimInput& in, const SimOptions& opt, int n_dev, bool output_dev,
                     uint64_t* device_bytes);
// The most trailing whole layers (then the output) that fit opt.budget_bytes.
void dense_layers_that_fit(const SimInput& in, const SimOptions& opt, int* n_dev,
                           bool* output_dev);

}  // namespace hc::perfmodel
