// Type tables and run-time dispatch. Compiled for the baseline ISA: this is where the CPU is
// asked what it supports before any AVX2 / AVX-512 code may run.
#include "quant/quant.h"

#include <cstdlib>
#include <string>

#include "core/status.h"
#include "quant/kernels.h"
#include "quant/ref.h"

namespace hc::quant {
namespace {

TypeKernels make_ref_base(GgmlType t) {
  namespace r = ref;
  switch (t) {
    case GgmlType::F32:
      return {r::dequantize_f32, r::quantize_f32, r::vec_dot_f32};
    case GgmlType::F16:
      return {r::dequantize_f16, r::quantize_f16, r::vec_dot_f16};
    case GgmlType::BF16:
      return {r::dequantize_bf16, r::quantize_bf16, r::vec_dot_bf16};
    case GgmlType::Q4_0:
      return {r::dequantize_q4_0, r::quantize_q4_0, r::vec_dot_q4_0_q8_0};
    case GgmlType::Q4_1:
      return {r::dequantize_q4_1, r::quantize_q4_1, r::vec_dot_q4_1_q8_1};
    case GgmlType::Q5_0:
      return {r::dequantize_q5_0, r::quantize_q5_0, r::vec_dot_q5_0_q8_0};
    case GgmlType::Q5_1:
      return {r::dequantize_q5_1, r::quantize_q5_1, r::vec_dot_q5_1_q8_1};
    case GgmlType::Q8_0:
      return {r::dequantize_q8_0, r::quantize_q8_0, r::vec_dot_q8_0_q8_0};
    case GgmlType::Q8_1:
      return {r::dequantize_q8_1, r::quantize_q8_1, nullptr};
    case GgmlType::Q4_K:
      return {r::dequantize_q4_K, r::quantize_q4_K, r::vec_dot_q4_K_q8_K};
    case GgmlType::Q5_K:
      return {r::dequantize_q5_K, r::quantize_q5_K, r::vec_dot_q5_K_q8_K};
    case GgmlType::Q6_K:
      return {r::dequantize_q6_K, r::quantize_q6_K, r::vec_dot_q6_K_q8_K};
    case GgmlType::Q8_K:
      return {r::dequantize_q8_K, r::quantize_q8_K, nullptr};
    default:
      return {};
  }
}

TypeKernels make_ref(GgmlType t) {
  TypeKernels k = make_ref_base(t);
  k.from_float = k.quantize;
  if (t == GgmlType::Q8_0) k.from_float = ref::x86::quantize_q8_0;
  if (t == GgmlType::Q8_1) k.from_float = ref::x86::quantize_q8_1;
  return k;
}

struct RefTable {
  TypeKernels types[kTypeSlots];
  RefTable() {
    for (int i = 0; i < kTypeSlots; ++i) types[i] = make_ref(static_cast<GgmlType>(i));
  }
};

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

// The fastest kernel of each type and operation: AVX-512 entry, else AVX2, else reference.
// Built once (thread-safe static) and immutable afterwards.
struct DispatchTable {
  TypeKernels types[kTypeSlots];
  int64_t block_size[kTypeSlots];  // cached: dtype_traits() is a table scan
  DispatchTable() {
    const IsaKernels* isas[] = {avx512_kernels(), avx2_kernels()};
    // HOTCOLD_ISA=ref|avx2|avx512 caps the instruction set (debugging, A/B measurements).
    if (const char* cap = std::getenv("HOTCOLD_ISA")) {
      const std::string c = cap;
      if (c == "ref") isas[0] = isas[1] = nullptr;
      if (c == "avx2") isas[0] = nullptr;
    }
    for (int i = 0; i < kTypeSlots; ++i) {
      TypeKernels k = make_ref(static_cast<GgmlType>(i));
      for (int j = 1; j >= 0; --j) {  // lowest ISA first so the best one wins
        if (!isas[j]) continue;
        const TypeKernels& s = isas[j]->types[i];
        if (s.dequantize) k.dequantize = s.dequantize;
        if (s.quantize) k.quantize = s.quantize;
        if (s.vec_dot) k.vec_dot = s.vec_dot;
        k.vec_dot4 = s.vec_dot ? s.vec_dot4 : k.vec_dot4;  // only with the vec_dot it twins
        k.vec_dot4_rows = s.vec_dot ? s.vec_dot4_rows : k.vec_dot4_rows;
        if (s.from_float) k.from_float = s.from_float;
      }
      types[i] = k;
      block_size[i] = dtype_traits(static_cast<uint32_t>(i)).block_size;
    }
  }
};

const DispatchTable& dispatch_table() {
  static const DispatchTable table;
  return table;
}

// Callers validate shapes when loading, so a bad type or n here is a programming error.
const TypeKernels& dispatched(GgmlType t, int64_t n) {
  const DispatchTable& table = dispatch_table();
  const int slot = type_slot(t);
  HC_CHECK(slot >= 0 && slot < kTypeSlots);
  const int64_t bs = table.block_size[slot];
  HC_CHECK(bs > 0 && n >= 0 && n % bs == 0);
  return table.types[slot];
}

void check_row(GgmlType t, int64_t n) {
  const int64_t bs = dtype_traits(t).block_size;
  HC_CHECK(bs > 0 && n >= 0 && n % bs == 0);
}

}  // namespace

const TypeKernels* ref_kernels(GgmlType t) {
  static const RefTable table;
  const int slot = type_slot(t);
  if (slot < 0 || slot >= kTypeSlots) return nullptr;
  const TypeKernels* k = &table.types[slot];
  return k->dequantize ? k : nullptr;
}

const IsaKernels* avx2_kernels() { return cpu_has_avx2() ? &kAvx2Kernels : nullptr; }
const IsaKernels* avx512_kernels() { return cpu_has_avx512() ? &kAvx512Kernels : nullptr; }

bool is_supported_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool can_quantize_to(GgmlType t) {
  return is_supported_weight_type(t) || t == GgmlType::Q8_1 || t == GgmlType::Q8_K;
}

GgmlType vec_dot_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    default:
      return t;  // F32, F16, BF16 pair with themselves
  }
}

void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n) {
  const TypeKernels* k = ref_kernels(t);
  HC_CHECK(k && k->dequantize);
  check_row(t, n);
  k->dequantize(src, dst, n);
}

void quantize_row_ref(GgmlType t, const float* src, void* dst, int64_t n) {
  const TypeKernels* k = ref_kernels(t);
  HC_CHECK(k && k->quantize);
  check_row(t, n);
  k->quantize(src, dst, n);
}

float vec_dot_ref(GgmlType t, int64_t n, const void* w, const void* a) {
  const TypeKernels* k = ref_kernels(t);
  HC_CHECK(k && k->vec_dot);
  check_row(t, n);
  return k->vec_dot(n, w, a);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const TypeKernels& k = dispatched(t, n);
  HC_CHECK(k.dequantize);
  k.dequantize(src, dst, n);
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  const TypeKernels& k = dispatched(t, n);
  HC_CHECK(k.quantize);
  k.quantize(src, dst, n);
}

void quantize_activations(GgmlType t, const float* src, void* dst, int64_t n) {
  const TypeKernels& k = dispatched(t, n);
  HC_CHECK(k.from_float);
  k.from_float(src, dst, n);
}

void quantize_activations_ref(GgmlType t, const float* src, void* dst, int64_t n) {
  const TypeKernels* k = ref_kernels(t);
  HC_CHECK(k && k->from_float);
  check_row(t, n);
  k->from_float(src, dst, n);
}

float vec_dot(GgmlType t, int64_t n, const void* w, const void* a) {
  const TypeKernels& k = dispatched(t, n);
  HC_CHECK(k.vec_dot);
  return k.vec_dot(n, w, a);
}

VecDotFn vec_dot_fn(GgmlType t) {
  const TypeKernels& k = dispatched(t, 0);
  HC_CHECK(k.vec_dot);
  return k.vec_dot;
}

VecDot4Fn vec_dot4_fn(GgmlType t) { return dispatched(t, 0).vec_dot4; }
VecDot4RowsFn vec_dot4_rows_fn(GgmlType t) { return dispatched(t, 0).vec_dot4_rows; }

const char* isa_name() {
  // The dispatch table's choice: the CPU's best, capped by HOTCOLD_ISA as the table is (so the
  // layers that pick their own kernels by this name, GEMM, decode layout, sparse FFN, follow).
  static const char* const name = [] {
    const char* cap = std::getenv("HOTCOLD_ISA");
    const std::string c = cap ? cap : "";
    if (avx512_kernels() && c != "ref" && c != "avx2") return kAvx512Kernels.name;
    if (avx2_kernels() && c != "ref") return kAvx2Kernels.name;
    return "scalar";
  }();
  return name;
}

}  // namespace hc::quant
