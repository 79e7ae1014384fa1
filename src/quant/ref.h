// Scalar reference kernels, one per (type, operation), exactly following ggml's reference
// code: ggml-quants.c for (de)quantisation and the *_generic dot products of
// ggml-cpu/quants.c (float accumulation order included). Reached through ref_kernels().
// n is a multiple of the type's block size; w and a point at whole blocks.
#pragma once
#include <cstdint>

namespace hc::quant::ref {

// quant_ref.cpp: plain floats and the 32-element block types.
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* a);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* a);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* a);

void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);

// kquants_ref.cpp: 256-element super-block types.
void dequantize_q4_K(const void* src, float* dst, int64_t n);
void quantize_q4_K(const float* src, void* dst, int64_t n);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
void dequantize_q5_K(const void* src, float* dst, int64_t n);
void quantize_q5_K(const float* src, void* dst, int64_t n);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);
void dequantize_q6_K(const void* src, float* dst, int64_t n);
void quantize_q6_K(const float* src, void* dst, int64_t n);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);
void dequantize_q8_K(const void* src, float* dst, int64_t n);
void quantize_q8_K(const float* src, void* dst, int64_t n);

// quant_x86_twin.cpp: scalar twins of what ggml-cpu runs on x86 (AVX2 / AVX-512 build) for the
// 32-element types, where it rounds differently from the generic code above: the run-time
// activation quantisers (from_float) and the 8-lane dot products. The SIMD kernels equal these
// bit for bit.
namespace x86 {
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
}  // namespace x86

}  // namespace hc::quant::ref
