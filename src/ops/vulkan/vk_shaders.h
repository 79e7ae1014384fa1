// The compute shaders' SPIR-V, compiled from shaders/*.comp by glslc at build time and embedded
// in the binary (the generated vk_shaders.cpp; see CMakeLists.txt). Names as vk_device.cpp's
// pipelines: "matvec_q4_0", "down_f16", "rmsnorm", ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hc::ops::vk {

struct SpirvBlob {
  const char* name;
  const uint32_t* code;
  size_t words;
};

// The blob of that name, or null.
const SpirvBlob* find_spirv(const std::string& name);

}  // namespace hc::ops::vk
