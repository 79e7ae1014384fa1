// Scalar references for the float types and the 32-element block types (ggml-quants.c,
// ggml-cpu/quants.c generic paths, ggml-cpu vec.h scalar loops).
//
// Bit-compatibility notes: every expression keeps ggml's operand order, and this file is
// compiled without FMA so that a*b + c rounds twice, as in gguf-py's numpy reference.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace hc::quant::ref {

// ---- F32 / F16 / BF16: dot products accumulate in double, as ggml's scalar ggml_float loop.

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);  // [n]
  const float* y = static_cast<const float*>(a);  // [n]
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const fp16_t* x = static_cast<const fp16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(x[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  fp16_t* y = static_cast<fp16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(src[i]);
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const fp16_t* x = static_cast<const fp16_t*>(w);
  const fp16_t* y = static_cast<const fp16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const bf16_t* x = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(x[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  bf16_t* y = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(src[i]);
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  const bf16_t* x = static_cast<const bf16_t*>(w);
  const bf16_t* y = static_cast<const bf16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

// ---- Q4_0: x = d * (q - 8); d = -max/8 where max is the signed value of largest magnitude,
// so the extreme lands exactly on q = 0 and the other side may clip at 15.

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const block_q4_0* x = static_cast<const block_q4_0*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      dst[i * QK4_0 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      dst[i * QK4_0 + j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  block_q4_0* y = static_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    const float* x = src + i * QK4_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      // int8 cast truncates toward zero: together with + 8.5 this rounds half up.
      const int xi0 = static_cast<int8_t>(x[j] * id + 8.5f);
      const int xi1 = static_cast<int8_t>(x[j + QK4_0 / 2] * id + 8.5f);
      y[i].qs[j] = static_cast<uint8_t>((xi0 < 15 ? xi0 : 15) | ((xi1 < 15 ? xi1 : 15) << 4));
    }
  }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const block_q4_0* x = static_cast<const block_q4_0*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      sumi0 += ((x[ib].qs[j] & 0x0F) - 8) * y[ib].qs[j];
      sumi1 += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + QK8_0 / 2];
    }
    sumf += (sumi0 + sumi1) * fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d);
  }
  return sumf;
}

// ---- Q4_1: x = d * q + m with m = block min, d = (max - min) / 15.

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const block_q4_1* x = static_cast<const block_q4_1*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK4_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      dst[i * QK4_1 + j] = (x[i].qs[j] & 0x0F) * d + m;
      dst[i * QK4_1 + j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  block_q4_1* y = static_cast<block_q4_1*>(dst);
  for (int64_t i = 0; i < n / QK4_1; ++i) {
    const float* x = src + i * QK4_1;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK4_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int xi0 = static_cast<int8_t>((x[j] - min) * id + 0.5f);
      const int xi1 = static_cast<int8_t>((x[j + QK4_1 / 2] - min) * id + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((xi0 < 15 ? xi0 : 15) | ((xi1 < 15 ? xi1 : 15) << 4));
    }
  }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const block_q4_1* x = static_cast<const block_q4_1*>(w);
  const block_q8_1* y = static_cast<const block_q8_1*>(a);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      sumi0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
      sumi1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + QK8_1 / 2];
    }
    // y.s = d_y * sum(q_y) carries the m * sum(a) term of sum((d q + m) * a).
    sumf += (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d)) * (sumi0 + sumi1) +
            fp16_to_fp32(x[ib].m) * fp16_to_fp32(y[ib].s);
  }
  return sumf;
}

// ---- Q5_0 / Q5_1: Q4_0 / Q4_1 with a fifth bit per element in qh (bit j: element j).

inline uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}
// Element j and j + 16 of a Q5 block, unsigned (0..31).
inline int q5_lo(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] & 0x0F) | static_cast<int>(((qh >> j) << 4) & 0x10);
}
inline int q5_hi(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
}

// x = d * (q - 16); d = -max/16 where max is the signed value of largest magnitude.
void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const block_q5_0* x = static_cast<const block_q5_0*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK5_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      dst[i * QK5_0 + j] = (q5_lo(x[i].qs, qh, j) - 16) * d;
      dst[i * QK5_0 + j + QK5_0 / 2] = (q5_hi(x[i].qs, qh, j) - 16) * d;
    }
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  block_q5_0* y = static_cast<block_q5_0*>(dst);
  for (int64_t i = 0; i < n / QK5_0; ++i) {
    const float* x = src + i * QK5_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK5_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      // int8 cast truncates toward zero: together with + 16.5 this rounds half up.
      const int v0 = static_cast<int8_t>(x[j] * id + 16.5f);
      const int v1 = static_cast<int8_t>(x[j + QK5_0 / 2] * id + 16.5f);
      const uint32_t xi0 = static_cast<uint8_t>(v0 < 31 ? v0 : 31);
      const uint32_t xi1 = static_cast<uint8_t>(v1 < 31 ? v1 : 31);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << j;
      qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const block_q5_0* x = static_cast<const block_q5_0*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    const uint32_t qh = load_qh(x[ib].qh);
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      sumi0 += (q5_lo(x[ib].qs, qh, j) - 16) * y[ib].qs[j];
      sumi1 += (q5_hi(x[ib].qs, qh, j) - 16) * y[ib].qs[j + QK8_0 / 2];
    }
    sumf += (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d)) * (sumi0 + sumi1);
  }
  return sumf;
}

// x = d * q + m with m = block min, d = (max - min) / 31.
void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const block_q5_1* x = static_cast<const block_q5_1*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK5_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      dst[i * QK5_1 + j] = q5_lo(x[i].qs, qh, j) * d + m;
      dst[i * QK5_1 + j + QK5_1 / 2] = q5_hi(x[i].qs, qh, j) * d + m;
    }
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  block_q5_1* y = static_cast<block_q5_1*>(dst);
  for (int64_t i = 0; i < n / QK5_1; ++i) {
    const float* x = src + i * QK5_1;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK5_1; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const uint32_t xi0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      const uint32_t xi1 = static_cast<uint8_t>((x[j + QK5_1 / 2] - min) * id + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << j;
      qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const block_q5_1* x = static_cast<const block_q5_1*>(w);
  const block_q8_1* y = static_cast<const block_q8_1*>(a);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
    const uint32_t qh = load_qh(x[ib].qh);
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_1 / 2; ++j) {
      sumi0 += q5_lo(x[ib].qs, qh, j) * y[ib].qs[j];
      sumi1 += q5_hi(x[ib].qs, qh, j) * y[ib].qs[j + QK8_1 / 2];
    }
    sumf += (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d)) * (sumi0 + sumi1) +
            fp16_to_fp32(x[ib].m) * fp16_to_fp32(y[ib].s);
  }
  return sumf;
}

// ---- Q8_0 / Q8_1: symmetric, d = amax / 127, round half away from zero (roundf).

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const block_q8_0* x = static_cast<const block_q8_0*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) dst[i * QK8_0 + j] = x[i].qs[j] * d;
  }
}

// Shared by Q8_0 and Q8_1: fills qs[32] and returns d; *sum gets sum(qs).
static float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) {
    const float ax = std::fabs(x[j]);
    amax = amax > ax ? amax : ax;
  }
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  *sum = 0;
  for (int j = 0; j < QK8_0; ++j) {
    qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    *sum += qs[j];
  }
  return d;
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    int sum;
    y[i].d = fp32_to_fp16(quantize_block_q8(src + i * QK8_0, y[i].qs, &sum));
  }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const block_q8_0* x = static_cast<const block_q8_0*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d));
  }
  return sumf;
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const block_q8_1* x = static_cast<const block_q8_1*>(src);  // [n / 32]
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_1; ++j) dst[i * QK8_1 + j] = x[i].qs[j] * d;
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  block_q8_1* y = static_cast<block_q8_1*>(dst);
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    int sum;
    const float d = quantize_block_q8(src + i * QK8_1, y[i].qs, &sum);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(sum * d);
  }
}

}  // namespace hc::quant::ref
