// Kernel tables behind quant.h: one scalar reference table and one table per x86 instruction
// set. Internal to the quant layer (and its tests, which check every SIMD entry against the
// reference entry of the same type).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/quant.h"

namespace hc::quant {

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);
// VecDotFn comes from quant.h.

// Kernels of one type; nullptr where the type has no such kernel (or, in an ISA table, where
// that ISA has nothing faster than the next table down).
struct TypeKernels {
  DequantizeFn dequantize = nullptr;
  QuantizeFn quantize = nullptr;
  VecDotFn vec_dot = nullptr;
  // ggml-cpu's run-time quantiser of matmul activations (type_traits_cpu[t].from_float); in
  // the reference table it is `quantize` except for Q8_0 / Q8_1 (see quantize_activations).
  QuantizeFn from_float = nullptr;
  // Four rows at once (w, w + stride, w + 2 stride, w + 3 stride) against one activation row,
  // each row bit-identical to vec_dot: four independent accumulator chains and one activation
  // load per block, for matrix-vector products. nullptr: call vec_dot per row.
  VecDot4Fn vec_dot4 = nullptr;
  // The same over four arbitrary rows (a firing set's rows: sparse matrix-vector products).
  VecDot4RowsFn vec_dot4_rows = nullptr;
};

// One slot per ggml type id (ids are small; MXFP4 = 39 is the largest dtype.h knows).
constexpr int kTypeSlots = 40;
struct IsaKernels {
  const char* name = nullptr;
  TypeKernels types[kTypeSlots] = {};
};

// Scalar references exactly following ggml-quants.c / ggml-cpu/quants.c (generic paths).
// nullptr for a type the quant layer does not handle.
const TypeKernels* ref_kernels(GgmlType t);

// Tables of the SIMD translation units, or nullptr when this CPU lacks the instruction set.
// AVX2 needs AVX2 + FMA + F16C; AVX-512 needs F, BW, VL, DQ and VNNI.
const IsaKernels* avx2_kernels();
const IsaKernels* avx512_kernels();

// The tables themselves, defined (constant-initialised, so no ISA code runs at start-up) in
// quant_avx2.cpp / quant_avx512.cpp. Use the accessors above, which check the CPU first.
extern const IsaKernels kAvx2Kernels;
extern const IsaKernels kAvx512Kernels;

constexpr int type_slot(GgmlType t) { return static_cast<int>(t); }

}  // namespace hc::quant
