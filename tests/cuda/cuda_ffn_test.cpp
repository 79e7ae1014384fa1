// What only the CUDA FFN has: gate and up fused into one kernel (ops/cuda/kernels.h
// launch_gate_up) give exactly the bits of the gate pass then the up pass, for ffn_threshold
// and ffn_rows, every gated kind, with and without a gate bias, 1-13 tokens (every mat-vec
// token width and a second group), rows that fit one x chunk and rows that span several, and
// gate / up of one type (fused) beside gate / up of two types (never fused: the same path).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../device/device_test_util.h"
#include "ops/cuda/cuda_testing.h"

namespace hc::device_test {
namespace {

class CudaFfn : public DeviceTest {};

std::vector<float> run_ffn(ops::Device* dev, bool fused, bool rows, const Matrix& gate,
                           const Matrix& up, const Matrix& down_t, const float* bias,
                           const float* x, int64_t n_tok, const int32_t* idx, int64_t n_idx,
                           const uint8_t* fire, ops::GluKind kind) {
  ops::cuda::set_ffn_fused(*dev, fused);
  const int64_t n_embd = gate.cols;
  DeviceBuffer out(dev, static_cast<uint64_t>(n_tok * n_embd) * 4);
  if (rows) {
    dev->ffn_rows(gate.view(), bias, up.view(), down_t.view(), x, n_tok, idx, n_idx, fire, kind,
                  out.as<float>());
  } else {
    dev->ffn_threshold(gate.view(), bias, up.view(), down_t.view(), x, n_tok, 0.05f, kind,
                       out.as<float>());
  }
  check(dev->sync(), rows ? "ffn_rows" : "ffn_threshold");
  ops::cuda::set_ffn_fused(*dev, true);
  return from_device<float>(dev, out.as<void>(), static_cast<size_t>(n_tok * n_embd));
}

TEST_F(CudaFfn, FusedGateUpGivesTheTwoPassesBits) {
  uint32_t seed = 1300;
  for (int64_t n_embd : {int64_t{256}, int64_t{3072}}) {  // one x chunk; several (2048 / 1024)
    for (GgmlType up_type : {GgmlType::Q4_0, GgmlType::Q8_0}) {
      const int64_t n_ff = 200;
      const Matrix gate = make_matrix(dev, GgmlType::Q4_0, n_ff, n_embd, ++seed);
      const Matrix up = make_matrix(dev, up_type, n_ff, n_embd, ++seed);
      const Matrix down_t = make_matrix(dev, GgmlType::Q8_0, n_ff, n_embd, ++seed);
      const auto bias = randn(static_cast<size_t>(n_ff), ++seed, 0.5f);
      auto dbias = to_device(dev, bias);
      for (int64_t n_tok : {1, 2, 3, 5, 8, 13}) {
        const auto x = randn(static_cast<size_t>(n_tok * n_embd), ++seed);
        auto dx = to_device(dev, x);
        const int64_t n_idx = 77;
        std::vector<int32_t> idx(n_idx);
        std::mt19937 rng(seed);
        for (int64_t k = 0; k < n_idx; ++k) idx[k] = static_cast<int32_t>((k * 37 + 5) % n_ff);
        std::vector<uint8_t> fire(static_cast<size_t>(n_tok * n_idx));
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t k = 0; k < n_idx; ++k) fire[t * n_idx + k] = k % 5 != 0 && (rng() & 1);
        auto didx = to_device(dev, idx);
        auto dfire = to_device(dev, fire);
        for (ops::GluKind kind : {ops::GluKind::kSilu, ops::GluKind::kRelu, ops::GluKind::kDRelu}) {
          for (bool rows : {false, true}) {
            for (const float* b : {static_cast<const float*>(nullptr), dbias->as<const float>()}) {
              const auto one = run_ffn(dev, true, rows, gate, up, down_t, b, dx->as<float>(), n_tok,
                                       didx->as<int32_t>(), n_idx, dfire->as<uint8_t>(), kind);
              const auto two = run_ffn(dev, false, rows, gate, up, down_t, b, dx->as<float>(), n_tok,
                                       didx->as<int32_t>(), n_idx, dfire->as<uint8_t>(), kind);
              ASSERT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4))
                  << (rows ? "ffn_rows" : "ffn_threshold") << " n_embd " << n_embd << " up "
                  << dtype_name(up_type) << " n_tok " << n_tok << " kind "
                  << static_cast<int>(kind) << (b ? " with bias" : "");
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hc::device_test
