#include "ops/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/repack.h"
#include "ops/cpu/vec.h"
#include "quant/quant.h"

namespace hc::ops {

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
  // ggml_compute_forward_rms_norm_f32: float squares summed in double (ggml_float), the mean
  // rounded to float, then (x * scale) * w (the fused rms_norm + mul; unfused it is the same).
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void layernorm(float* out, const float* x, const float* w, const float* b, int64_t n, float eps) {
  // ggml_compute_forward_norm_f32: the sum in double, mean rounded to float; centred values
  // stored, their squares summed in double; then ggml_mul (w) and ggml_add (b), each rounded.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  double sum2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] - mean;
    out[i] = v;
    sum2 += static_cast<double>(v * v);
  }
  const float variance = static_cast<float>(sum2 / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = out[i] * scale * w[i];
    out[i] = b ? y + b[i] : y;
  }
}

void rope_cache(float* cos_sin, int64_t n_rot, float theta_scale, float freq_scale,
                const float* freq_factors, int64_t pos) {
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float ff = freq_factors ? freq_factors[i] : 1.0f;
    const float t = freq_scale * (theta / ff);
    // sincosf, as GCC compiles ggml's cosf/sinf pair; mscale (attn_factor) is 1.
    ::sincosf(t, &cos_sin[2 * i + 1], &cos_sin[2 * i]);
    theta *= theta_scale;
  }
}

void rope_apply(float* x, int64_t n_rot, const float* cos_sin) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    // libggml-cpu.so contracts rotate_pairs into fma(x0, c, -(x1 * s)) and fma(x0, s, x1 * c)
    // (vfmsub231ss / vfmadd132ss, vfmaddsub231ps when vectorised).
    x[2 * i] = std::fma(x0, c, -(x1 * s));
    x[2 * i + 1] = std::fma(x0, s, x1 * c);
  }
}

void rope_apply_neox(float* x, int64_t n_rot, const float* cos_sin) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = x[i], x1 = x[i + half];
    // ggml's rotate_pairs serves both modes (contracted the same way as rope_apply).
    x[i] = std::fma(x0, c, -(x1 * s));
    x[i + half] = std::fma(x0, s, x1 * c);
  }
}

void softmax(float* x, int64_t n) {
  // ggml_compute_forward_soft_max_f32 without scale or mask.
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const double sum = vec::kernels().soft_max(x, x, n, n, mx);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(float* gate, const float* up, int64_t n) { vec::kernels().swiglu(gate, gate, up, n); }

void swiglu_each(float* gate, const float* up, int64_t n) {
  constexpr int64_t kBlock = 16;  // the widest kernel's block (vec.h); others are per element
  const int64_t body = n / kBlock * kBlock;
  if (body > 0) vec::kernels().swiglu(gate, gate, up, body);
  if (body == n) return;
  float g[kBlock] = {}, u[kBlock] = {};
  std::copy(gate + body, gate + n, g);
  std::copy(up + body, up + n, u);
  vec::kernels().swiglu(g, g, u, kBlock);
  std::copy(g, g + (n - body), gate + body);
}

void reglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
}

void dreglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i] > 0.0f ? gate[i] : 0.0f, u = up[i] > 0.0f ? up[i] : 0.0f;
    gate[i] = g * u;
  }
}

float gelu_f32(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

void gelu(float* x, int64_t n) {
  // ggml_table_gelu_f16: fp16(gelu_f32(v)) for every fp16 value v.
  static const std::vector<fp16_t> table = [] {
    std::vector<fp16_t> t(1u << 16);
    for (uint32_t i = 0; i < t.size(); ++i)
      t[i] = fp32_to_fp16(gelu_f32(fp16_to_fp32(static_cast<fp16_t>(i))));
    return t;
  }();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) x[i] = 0.0f;
    else if (v < 10.0f) x[i] = fp16_to_fp32(table[fp32_to_fp16(v)]);
  }
}

int32_t argmax_row(const float* x, int64_t n) {
  int64_t best = 0;
  float bl = n > 0 && !std::isnan(x[0]) ? x[0] : -std::numeric_limits<float>::infinity();
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > bl) {  // false for NaN
      bl = x[i];
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void get_row(const TensorView& table, int64_t i, float* out) {
  if (table.packed) {  // tied embeddings in the decode layout: leave the dropped pages alone
    thread_local std::vector<uint8_t> row;
    row.resize(static_cast<size_t>(row_bytes(table.type, table.ne0)));
    repack_unpack_row(table, i, row.data());
    quant::dequantize_row(table.type, row.data(), out, table.ne0);
    return;
  }
  quant::dequantize_row(table.type, table.row(i), out, table.ne0);
}

}  // namespace hc::ops
