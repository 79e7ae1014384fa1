// ggml tensor types: ids, block sizes and byte sizes exactly as ggml defines them, so that
// GGUF files from the llama.cpp ecosystem can be sized (and rejected clearly) even for types
// the engine does not compute with.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hc {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct DTypeTraits {
  const char* name = nullptr;  // nullptr: not a ggml type id
  int64_t block_size = 0;      // elements per block
  int64_t type_size = 0;       // bytes per block
};

// Traits for a raw type id from a file; name == nullptr when the id is unknown.
DTypeTraits dtype_traits(uint32_t type_id);
inline DTypeTraits dtype_traits(GgmlType t) { return dtype_traits(static_cast<uint32_t>(t)); }
inline const char* dtype_name(GgmlType t) {
  const char* n = dtype_traits(t).name;
  return n ? n : "unknown";
}
// Parses "q4_0", "Q4_K", "f16", ... ; returns false when unknown.
bool dtype_from_name(const std::string& name, GgmlType* out);

// Bytes of one row of `n` elements (n must be a multiple of the block size).
inline int64_t row_bytes(GgmlType t, int64_t n) {
  const DTypeTraits tr = dtype_traits(t);
  return n / tr.block_size * tr.type_size;
}

// --- half / bfloat16 conversion (bit-exact with ggml's reference conversions) ---
using fp16_t = uint16_t;
using bf16_t = uint16_t;

inline float fp32_from_bits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

float fp16_to_fp32(fp16_t h);
fp16_t fp32_to_fp16(float f);  // round to nearest even
inline float bf16_to_fp32(bf16_t h) { return fp32_from_bits(static_cast<uint32_t>(h) << 16); }
bf16_t fp32_to_bf16(float f);  // round to nearest even, NaN kept quiet (as ggml)

}  // namespace hc
