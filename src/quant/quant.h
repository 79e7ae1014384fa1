// Block formats bit-compatible with ggml. Every type has a scalar reference (_ref) for
// dequantise, quantise and dot product; the un-suffixed functions dispatch at run time to the
// fastest path this CPU supports (AVX2 / AVX-512), each tested against its _ref twin.
//
// Dot products follow ggml's scheme: activations are first quantised to vec_dot_type(w_type)
// (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F16 for F16, BF16 for BF16,
// F32 for F32) and the integer/float dot product is taken block by block.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::quant {

// Weight types the engine computes with: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K.
bool is_supported_weight_type(GgmlType t);
// Types quantize_row accepts as a target (the weight types plus Q8_1 and Q8_K).
bool can_quantize_to(GgmlType t);
// Activation type paired with weight type t.
GgmlType vec_dot_type(GgmlType t);

// n must be a multiple of the type's block size (HC_CHECK; callers validate shapes on load).
// Pointers need only the blocks' natural alignment (2 bytes; 4 for F32 and Q8_K), never
// vector alignment. F32/F16/BF16 rows use block size 1.
void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n);
void quantize_row_ref(GgmlType t, const float* src, void* dst, int64_t n);
// w: n elements of type t; a: n elements of type vec_dot_type(t). Returns sum_i w_i * a_i.
float vec_dot_ref(GgmlType t, int64_t n, const void* w, const void* a);

// Run-time dispatched versions. dequantize_row and quantize_row give exactly the _ref bytes;
// vec_dot agrees with vec_dot_ref up to float rounding (different accumulation order). For
// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 the SIMD vec_dot is bit-identical to ggml-cpu's x86 kernel
// (ref::x86).
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);
float vec_dot(GgmlType t, int64_t n, const void* w, const void* a);

// Quantises a row of matmul activations to t = vec_dot_type(weight type) the way ggml-cpu does
// at run time (type_traits_cpu[t].from_float), which is not quantize_row for Q8_0 / Q8_1: on
// x86 ggml uses id = 127 / amax and rounds half to even (arch/x86/quants.c), where the
// reference (used for weights, by llama-quantize) uses 1 / d and roundf. Both versions follow
// that x86 code on every CPU, so results do not depend on the instruction set;
// quantize_activations_ref is the scalar twin. Other types: same bytes as quantize_row.
void quantize_activations(GgmlType t, const float* src, void* dst, int64_t n);
void quantize_activations_ref(GgmlType t, const float* src, void* dst, int64_t n);

// The kernel vec_dot(t, ...) runs, for per-row hot loops that should skip the dispatch checks.
// The caller guarantees n % block size == 0. HC_CHECK: t must be a supported weight type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
VecDotFn vec_dot_fn(GgmlType t);
// Four rows (w + i * stride, i < 4) against one activation row: out[i] = vec_dot(n, row i, a),
// bit for bit, with the rows' dependency chains interleaved. nullptr when the dispatched ISA
// has no such kernel for t (then call the VecDotFn per row).
using VecDot4Fn = void (*)(int64_t n, const void* w, int64_t stride, const void* a, float* out);
VecDot4Fn vec_dot4_fn(GgmlType t);
// The same over four rows anywhere (rows[i], i < 4), bit for bit vec_dot of each: the rows of a
// firing set (ops/cpu/sparse.h). nullptr where vec_dot4_fn is.
using VecDot4RowsFn = void (*)(int64_t n, const void* const* rows, const void* a, float* out);
VecDot4RowsFn vec_dot4_rows_fn(GgmlType t);
// Widest instruction set the dispatched kernels use on this CPU: "avx512", "avx2", "scalar".
const char* isa_name();

}  // namespace hc::quant
