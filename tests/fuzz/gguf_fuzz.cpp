// libFuzzer entry: parse_gguf must return (ok or error) for any input, never crash, and every
// parsed tensor must lie inside the input.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = hc::parse_gguf(std::span<const uint8_t>(data, size));
  if (!f.ok()) return 0;
  for (const auto& t : f->tensors) {
    if (t.data < data || t.data + t.nbytes > data + size) std::abort();
  }
  for (const auto& [k, v] : f->kv) (void)v.to_string();
  return 0;
}
