// Re-quantisation of a GGUF model (`hotcold quantize`), following llama.cpp's
// llama_model_quantize (src/llama-quant.cpp):
//  - only tensors named "*weight" with >= 2 non-trivial dimensions are converted; norms,
//    1-D tensors and a few small special matrices are copied unchanged;
//  - for quantized targets, llama_tensor_get_type's mixture rules pick a per-tensor type
//    (output.weight -> Q6_K, the "use_more_bits" layers of attn_v / ffn_down -> Q6_K for
//    Q4_K_M and Q5_K_M, ...), unless `pure`;
//  - a row length that the chosen type's block does not divide falls back to a compatible type.
// Simplifications against llama.cpp (the engine computes only F32 F16 BF16 Q8_0 Q4_0 Q4_1
// Q4_K Q5_K Q6_K): the fallback of Q4_K is Q4_1 (llama.cpp: Q5_0) and of Q5_K is Q8_0
// (llama.cpp: Q5_1); Q6_K -> Q8_0 and the final F16 step are as in llama.cpp. No importance
// matrix, no per-tensor overrides. Tensors keep the input file's order.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "format/gguf.h"

namespace hc {

// llama.cpp's llama_ftype values, stored as general.file_type.
enum class LlamaFtype : uint32_t {
  ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2, MOSTLY_Q4_1 = 3, MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8, MOSTLY_Q5_1 = 9,
  MOSTLY_Q4_K_S = 14, MOSTLY_Q4_K_M = 15, MOSTLY_Q5_K_S = 16, MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18, MOSTLY_BF16 = 32,
};

// llama.cpp's name of a general.file_type value ("Q4_K_M", "F16"; llama_model_ftype_name without
// "MOSTLY_"); empty for a value it does not know.
std::string llama_ftype_name(uint32_t ftype);

struct QuantizeTarget {
  std::string name;       // canonical upper-case name, e.g. "Q4_K_M"
  LlamaFtype ftype = LlamaFtype::ALL_F32;
  GgmlType base = GgmlType::F32;  // llama.cpp's default_type for the ftype
  bool pure = false;      // every converted tensor gets `base` (no mixture rules)
};

// Case-insensitive: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q4_K_S Q4_K_M Q5_K Q5_K_S Q5_K_M Q6_K.
// Q4_K and Q5_K mean the uniform type (ftype Q4_K_S / Q5_K_S); llama-quantize instead treats
// them as aliases of the _M mixtures.
Result<QuantizeTarget> parse_quantize_target(const std::string& name);
// "F32, F16, ..." for usage text and error messages.
std::string quantize_target_names();

struct TensorQuantPlan {
  std::string name;
  GgmlType from = GgmlType::F32;
  GgmlType to = GgmlType::F32;
  bool convert = false;   // false: data copied verbatim (to == from)
  std::string note;       // why the type differs from the target's base type, if it does
};

// Per-tensor decisions, in the file's tensor order. Pure function of names, shapes, types and
// metadata (general.architecture, <arch>.block_count / expert_count / attention.head_count*).
// Errors: a tensor that must be converted from a type the engine cannot dequantise.
Result<std::vector<TensorQuantPlan>> plan_quantization(const GgufFile& in,
                                                       const QuantizeTarget& target);

// The converted model: `writer` holds the metadata and tensors; tensor spans point into
// `buffers` (converted tensors) or into the input file's bytes (copied tensors), so both the
// input mapping and this object must stay alive while the writer is used.
struct QuantizedModel {
  std::vector<TensorQuantPlan> plan;
  std::vector<std::vector<uint8_t>> buffers;
  GgufWriter writer;
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Called after each tensor: (index, count, plan entry, output bytes of the tensor).
using QuantizeProgress =
    std::function<void(size_t i, size_t n, const TensorQuantPlan& p, uint64_t bytes)>;

// Executes the plan: rows are dequantised to f32 and re-quantised, split over `pool`.
// Metadata is copied with general.file_type and general.quantization_version updated.
// Errors: split models, unsupported types, non-finite weights (naming tensor and row).
Result<QuantizedModel> quantize_model(const GgufFile& in, const QuantizeTarget& target,
                                      ThreadPool* pool, const QuantizeProgress& progress = {});

}  // namespace hc
