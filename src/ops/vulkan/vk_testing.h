// Test hooks of the Vulkan device (tests only).
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ops/device.h"

namespace hc::ops::vk {

// Makes a Vulkan device behave as after VK_ERROR_DEVICE_LOST (its queue drained first): every
// later operation is skipped and reported, every sync() is an error naming the loss.
void lose_device_for_test(Device& dev);

// Whether dev's FFN operators compute gate and up in one dispatch (the default, unless
// HOTCOLD_VK_FFN_FUSED=0) or in two passes: the two must give the same bits.
void set_ffn_fused_for_test(Device& dev, bool fused);

// The bytes the device quantises x [n_tok, ne0] (device memory) to before a matmul with weights
// of type t (the weight's vec_dot_type blocks, as the host's quantize_activations writes them).
Result<std::vector<uint8_t>> quantized_activations_for_test(Device& dev, GgmlType t,
                                                           const float* x, int64_t n_tok,
                                                           int64_t ne0);

}  // namespace hc::ops::vk
