// ggml-cpu's vector primitives that attention and the FFN activation need bit for bit, as
// llama.cpp's x86 builds compute them (ggml-cpu/vec.h, vec.cpp, simd-mappings.h and
// llamafile/sgemm.cpp). Greedy decoding only agrees with llama.cpp on near-ties if these round
// exactly as ggml's do. A native llama.cpp build is one of two flavours, and hotcold follows
// the one its host's llama.cpp runs (flavour()):
//   avx512: AVX-512 F/BW/VL/DQ, no AVX512-FP16 (Zen 4 class, Intel Xeon since Skylake-SP):
//           16 lanes, the comments on the fields below;
//   avx2:   AVX2 + FMA + F16C only (Zen 2/3 class): 8 lanes, ggml_vec_dot_f16 with 4 x 8 lanes
//           over steps of 32 and GGML_F32x8_REDUCE, tinyBLAS<8, __m256> with hsum, soft_max and
//           silu in blocks of 8 with ggml_v_expf's AVX2 branch (a different polynomial tail).
//
// Every primitive has a scalar twin per flavour that reproduces ggml's lane structure and
// rounding on any CPU, and a SIMD version tested bit-identical to it (tests/ops/vec_test.cpp).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::ops::vec {

struct Kernels {
  const char* name = nullptr;
  // ggml_vec_dot_f16 over n elements, of which only the first n_valid are read; the others
  // count as zero products (masked cache positions). 4 x 16 lanes of FMA over steps of 64,
  // reduced ((a0 + a2) + (a1 + a3), then _mm512_reduce_add_ps), then the tail beyond
  // n & ~63 added in double.
  float (*dot_f16)(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) = nullptr;
  // llamafile tinyBLAS<16, __m512> F16 x F16, which ggml uses when a matmul has >= 2 columns:
  // one 16-lane FMA accumulator over n (n % 16 == 0), reduced by _mm512_reduce_add_ps.
  float (*dot_f16_tinyblas)(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) = nullptr;
  // Many rows against one y, as attention's kq (rows = cache positions) and kqv (rows = head
  // dims) need: out[r] = dot_f16(x + r * ldx, y, n_valid, n) for r < nr, and likewise for
  // the tinyBLAS order, bit for bit. The AVX-512 versions reduce 16 rows at once with the same
  // additions _mm512_reduce_add_ps makes for each, so short rows stop paying one horizontal
  // reduction each. Each row and y are read as the one-row kernels read them (dot_f16: the
  // first n_valid elements; tinyBLAS: the first min(n_valid, n)), so cache cells beyond them
  // may hold anything.
  void (*dot_f16_rows)(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y, int64_t n_valid,
                       int64_t n, float* out) = nullptr;
  void (*dot_f16_tinyblas_rows)(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                                int64_t n_valid, int64_t n, float* out) = nullptr;
  // ggml_vec_soft_max_f32: y[i] = exp(x[i] - max) for i < n_valid, ggml_v_expf in blocks of 16
  // below n & ~15 and expf above; returns the sum in ggml's order (each block reduced in float,
  // blocks and tail added in double). Positions [n_valid, n) are masked: exp = 0, not stored.
  double (*soft_max)(float* y, const float* x, int64_t n_valid, int64_t n, float max) = nullptr;
  // ggml_vec_swiglu_f32: y = silu(x) * g, ggml_v_silu in blocks of 16, x / (1 + expf(-x)) on the
  // tail. y may alias x.
  void (*swiglu)(float* y, const float* x, const float* g, int64_t n) = nullptr;
};

enum class Flavour { kAvx512, kAvx2 };

// The flavour of this host's native llama.cpp: avx512 where the CPU has AVX-512 F/BW/VL/DQ,
// else avx2 (also under HOTCOLD_ISA=avx2, which stands in for such a host).
Flavour flavour();

// Scalar twins (exact everywhere) of the avx512 and the avx2 flavour.
const Kernels& scalar_kernels();
const Kernels& scalar_avx2_kernels();
// The scalar twins of flavour(): the bits kernels() gives.
const Kernels& flavour_twin();
// AVX-512 versions, or nullptr when the CPU lacks AVX-512 F/BW/VL/DQ.
const Kernels* avx512_kernels();
// AVX2 versions of the avx2 flavour, or nullptr when the CPU lacks AVX2, FMA or F16C.
const Kernels* avx2_kernels();
// The flavour's SIMD kernels, or its scalar twins (HOTCOLD_ISA=ref, or no SIMD): same bits.
const Kernels& kernels();

// ggml_v_expf (AVX-512 version) for one lane, and _mm512_reduce_add_ps of 16 floats as GCC
// implements it: exposed for tests and the scalar twins.
float v_expf(float x);
float reduce_add_16(const float* a);
// The avx2 flavour's: ggml_v_expf's AVX2 branch for one lane; hsum of 8 lanes as sgemm's
// hsum(__m256) and soft_max's block sum add them ((l + l+4), then (0 + 2) + (1 + 3)); and
// GGML_F32x8_REDUCE's final step ((l + l+4), then (0 + 1) + (2 + 3) by two hadds).
float v_expf_avx2(float x);
float hsum_8(const float* a);
float reduce_dot_8(const float* a);

}  // namespace hc::ops::vec
