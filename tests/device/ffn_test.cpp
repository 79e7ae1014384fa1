// The hot-neuron FFN operators of every device (ffn_threshold, ffn_rows) against a scalar
// reconstruction from the dequantised weights: g = gate_j . x, u = up_j . x in double, the
// firing decision, h = act(g) u, out = sum_j h_j down_t[j]. Every weight type (gate, up and
// down_t of that type) and mixed types, odd n_embd (partial 1024-column blocks, float rows with
// a partial 8-element group), neuron counts that split into several ranges or one or none,
// n_tok 1 to 17 (groups of 8 tokens and their tails).
//
// Error bound per output: g and u carry kDotUlps u S (S = sum |w x|; on a device that quantises
// activations, g and u are ggml's dot products over those activations, see DeviceDots in
// device_test_util.h, and the threshold applies to them); h = act(g) u carries
// |act'| e_g |u| + |act(g)| e_u (|silu'| <= 1.1); out adds sum_j e_h |down_t[j]| and the fp32
// rounding of its own sum. A threshold decision within 1.1 e_g of the threshold may go either
// way on the device: the reference counts half of that neuron and allows the other half.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

class DeviceFfn : public DeviceTest {};

struct Weights {
  Matrix gate, up, down_t;  // [n_sub, n_embd] each
};

Weights make_weights(ops::Device* dev, GgmlType t, int64_t n_sub, int64_t n_embd, uint32_t seed) {
  return {make_matrix(dev, t, n_sub, n_embd, seed), make_matrix(dev, t, n_sub, n_embd, seed + 1),
          make_matrix(dev, t, n_sub, n_embd, seed + 2)};
}

double act(double g, ops::GluKind kind) {
  return kind == ops::GluKind::kSilu ? g / (1 + std::exp(-g)) : std::max(g, 0.0);
}

// How much of neuron k counts for token t: 1 fires, 0 does not, 0.5 either (too close to call).
using FireFn = std::function<double(int64_t t, size_t k, double act_g, double err_g)>;

// out [n_tok, n_embd] and its tolerance for the neurons `rows` (of the compact matrices).
struct Reference {
  std::vector<double> out, tol;
};
// bias (may be empty): [n_sub] added to every gate value (OPT's up bias), exactly in fp32.
Reference reference(const Weights& w, const std::vector<float>& x, int64_t n_tok,
                    const std::vector<int64_t>& rows, ops::GluKind kind, const FireFn& fires,
                    const std::vector<float>& bias = {}) {
  const int64_t n_embd = w.gate.cols;
  Reference r{std::vector<double>(static_cast<size_t>(n_tok * n_embd), 0.0),
              std::vector<double>(static_cast<size_t>(n_tok * n_embd), 1e-30)};
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x.data() + t * n_embd;
    const DeviceDots gate_dot(w.gate.type, xt, n_embd), up_dot(w.up.type, xt, n_embd);
    for (size_t k = 0; k < rows.size(); ++k) {
      BoundedDot g = gate_dot(w.gate, rows[k]);
      if (!bias.empty()) {  // one more fp32 rounding of the sum
        g.value += bias[static_cast<size_t>(rows[k])];
        g.bound += kU * std::fabs(g.value);
      }
      // Ungated ReLU (Falcon): h = relu(g), as if u were exactly 1 (the device reads no up).
      const BoundedDot u = kind == ops::GluKind::kReluUngated ? BoundedDot{1.0, 0.0}
                                                              : up_dot(w.up, rows[k]);
      const double a = act(g.value, kind);
      const double share = fires(t, k, a, g.bound);
      if (share == 0) continue;
      // dReLU: relu(g) * relu(u); relu moves by no more than its argument, so u's bound holds.
      const double h = a * (kind == ops::GluKind::kDRelu ? std::max(u.value, 0.0) : u.value);
      // A device that rounds as ggml's kernels (the CPU device) also rounds h to an F16 / BF16
      // down_t's dot type before the down projection (ops::round_h_by_value).
      const GgmlType hv = quant::vec_dot_type(w.down_t.type);
      const double h_round = !quantises_activations() ? 0.0
                             : hv == GgmlType::F16   ? kU16
                             : hv == GgmlType::BF16  ? 1.0 / 256
                                                     : 0.0;
      const double eh = 1.1 * g.bound * std::fabs(u.value) + std::fabs(a) * u.bound +
                        g.bound * u.bound + (8 * kU + h_round) * std::fabs(h);
      const float* d = w.down_t.row(rows[k]);
      for (int64_t c = 0; c < n_embd; ++c) {
        const double hd = h * d[c];
        r.out[t * n_embd + c] += share * hd;
        r.tol[t * n_embd + c] += (share < 1 ? std::fabs(hd) / 2 : 0.0) + eh * std::fabs(d[c]) +
                                 kDotUlps * kU * std::fabs(hd);
      }
    }
  }
  return r;
}

void expect_close(const std::vector<float>& got, const Reference& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.out.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], ref.out[i], ref.tol[i]) << what << " i " << i;
  }
}

// The median of |act(g)| over every token and neuron: half the decisions go each way.
float median_threshold(const Weights& w, const std::vector<float>& x, int64_t n_tok,
                       ops::GluKind kind, const std::vector<float>& bias) {
  const int64_t n_embd = w.gate.cols;
  std::vector<double> a;
  for (int64_t t = 0; t < n_tok; ++t) {
    const DeviceDots dots(w.gate.type, x.data() + t * n_embd, n_embd);
    for (int64_t j = 0; j < w.gate.rows; ++j) {
      const double b = bias.empty() ? 0.0 : bias[static_cast<size_t>(j)];
      a.push_back(std::fabs(act(dots(w.gate, j).value + b, kind)));
    }
  }
  std::nth_element(a.begin(), a.begin() + a.size() / 2, a.end());
  return static_cast<float>(a[a.size() / 2]);
}

int64_t test_embd(GgmlType t) {
  const int64_t bs = dtype_traits(t).block_size;
  return bs == 1 ? 1031 : bs == 32 ? 1056 : 1280;
}

std::string describe(const Weights& w, int64_t n_tok) {
  return std::string(dtype_name(w.gate.type)) + "/" + dtype_name(w.up.type) + "/" +
         dtype_name(w.down_t.type) + " [" + std::to_string(w.gate.rows) + ", " +
         std::to_string(w.gate.cols) + "] n_tok " + std::to_string(n_tok);
}

// exact: ReLU with threshold 0, the FFN over every held neuron. with_bias: a gate bias per
// neuron (OPT's), of the gate values' size.
void run_threshold(ops::Device* dev, const Weights& w, int64_t n_tok, ops::GluKind kind, bool exact,
                   uint32_t seed, bool with_bias = false) {
  const int64_t n_embd = w.gate.cols, n_sub = w.gate.rows;
  const auto x = randn(static_cast<size_t>(n_tok * n_embd), seed, 0.5f);
  const std::vector<float> bias =
      with_bias ? randn(static_cast<size_t>(n_sub), seed + 7, 2.0f) : std::vector<float>{};
  const float threshold = exact ? 0.0f : median_threshold(w, x, n_tok, kind, bias);
  auto dx = to_device(dev, x);
  auto dbias = to_device(dev, with_bias ? bias : std::vector<float>(1, 0.0f));
  DeviceBuffer out(dev, static_cast<uint64_t>(n_tok * n_embd) * 4);
  // Ungated: no up at all (an empty view), which the device must not read.
  const TensorView up = kind == ops::GluKind::kReluUngated ? TensorView{} : w.up.view();
  dev->ffn_threshold(w.gate.view(), with_bias ? dbias->as<float>() : nullptr, up,
                     w.down_t.view(), dx->as<float>(), n_tok, threshold,
                     kind, out.as<float>());
  check(dev->sync(), "ffn_threshold");
  std::vector<int64_t> rows(static_cast<size_t>(n_sub));
  std::iota(rows.begin(), rows.end(), 0);
  const Reference ref =
      reference(w, x, n_tok, rows, kind, [&](int64_t, size_t, double a, double eg) {
        const double dist = std::fabs(a) - threshold;
        return std::fabs(dist) <= 1.1 * eg ? 0.5 : dist > 0 ? 1.0 : 0.0;
      }, bias);
  expect_close(from_device<float>(dev, out.as<void>(), ref.out.size()), ref,
               "ffn_threshold " + describe(w, n_tok));
}

TEST_F(DeviceFfn, ThresholdEveryTypeMatchesScalarReconstruction) {
  uint32_t seed = 1000;
  for (GgmlType t : kAllTypes) {
    for (int64_t n_sub : {5, 300}) {
      const Weights w = make_weights(dev, t, n_sub, test_embd(t), seed += 3);
      for (int64_t n_tok : {1, 3, 8, 17}) {
        run_threshold(dev, w, n_tok, ops::GluKind::kSilu, false, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kRelu, true, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kDRelu, true, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kDRelu, false, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kReluUngated, true, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kReluUngated, false, ++seed);
        run_threshold(dev, w, n_tok, ops::GluKind::kReluUngated, true, ++seed, /*bias=*/true);
        run_threshold(dev, w, n_tok, ops::GluKind::kRelu, false, ++seed, /*bias=*/true);
      }
    }
  }
}

// share: the fraction of neurons selected (0: none, out = 0).
void run_rows(ops::Device* dev, const Weights& w, int64_t n_tok, double share, uint32_t seed) {
  const int64_t n_embd = w.gate.cols, n_sub = w.gate.rows;
  std::mt19937 rng(seed);
  std::vector<int32_t> idx;
  for (int32_t j = 0; j < n_sub; ++j) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < share) idx.push_back(j);
  }
  const int64_t n_idx = static_cast<int64_t>(idx.size());
  std::vector<uint8_t> fire(static_cast<size_t>(n_tok * n_idx));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t k = 0; k < n_idx; ++k) {
      // Every 7th selected neuron fires for no token: its rows must not matter.
      fire[t * n_idx + k] = k % 7 != 0 && (rng() & 1);
    }
  }
  const auto x = randn(static_cast<size_t>(n_tok * n_embd), seed + 1, 0.5f);
  auto dx = to_device(dev, x);
  auto didx = to_device(dev, idx);
  auto dfire = to_device(dev, fire);
  const std::vector<float> garbage(static_cast<size_t>(n_tok * n_embd), 1e30f);
  auto out = to_device(dev, garbage);  // overwritten, even with no neurons
  const std::vector<float> bias = randn(static_cast<size_t>(n_sub), seed + 9, 2.0f);
  auto dbias = to_device(dev, bias);
  for (ops::GluKind kind : {ops::GluKind::kSilu, ops::GluKind::kRelu, ops::GluKind::kDRelu,
                            ops::GluKind::kReluUngated}) {
    const TensorView up = kind == ops::GluKind::kReluUngated ? TensorView{} : w.up.view();
    // The ungated kind with OPT's gate bias, the others without.
    const bool with_bias = kind == ops::GluKind::kReluUngated;
    dev->ffn_rows(w.gate.view(), with_bias ? dbias->as<float>() : nullptr, up, w.down_t.view(),
                  dx->as<float>(), n_tok,
                  didx->as<int32_t>(), n_idx, dfire->as<uint8_t>(), kind, out->as<float>());
    check(dev->sync(), "ffn_rows");
    const std::vector<int64_t> rows(idx.begin(), idx.end());
    const Reference ref =
        reference(w, x, n_tok, rows, kind, [&](int64_t t, size_t k, double, double) {
          return fire[t * n_idx + static_cast<int64_t>(k)] != 0 ? 1.0 : 0.0;
        }, with_bias ? bias : std::vector<float>{});
    expect_close(from_device<float>(dev, out->as<void>(), ref.out.size()), ref,
                 "ffn_rows " + describe(w, n_tok) + " n_idx " + std::to_string(n_idx));
  }
}

TEST_F(DeviceFfn, RowsEveryTypeMatchesScalarReconstruction) {
  uint32_t seed = 2000;
  for (GgmlType t : kAllTypes) {
    const Weights w = make_weights(dev, t, 300, test_embd(t), seed += 3);
    for (int64_t n_tok : {1, 3, 8, 9, 17}) {
      run_rows(dev, w, n_tok, 0.4, ++seed);
      run_rows(dev, w, n_tok, 0.03, ++seed);  // a few neurons: one split
      run_rows(dev, w, n_tok, 0.0, ++seed);   // none: out = 0
    }
  }
}

// ffn_threshold_rows (a server's decode steps over hot neurons): every row bit for bit what a
// one-row ffn_threshold gives, though the rows fire different neurons (a threshold at the
// median) and the batch crosses the devices' groups of 8 tokens.
TEST_F(DeviceFfn, ThresholdRowsEqualOneRowCalls) {
  uint32_t seed = 3000;
  for (GgmlType t : kAllTypes) {
    const Weights w = make_weights(dev, t, 300, test_embd(t), seed += 3);
    const int64_t n_embd = w.gate.cols;
    for (int64_t n_tok : {2, 9, 17}) {
      const auto x = randn(static_cast<size_t>(n_tok * n_embd), ++seed, 0.5f);
      auto dx = to_device(dev, x);
      for (ops::GluKind kind : {ops::GluKind::kSilu, ops::GluKind::kRelu}) {
        const float threshold = median_threshold(w, x, n_tok, kind, {});
        const uint64_t bytes = static_cast<uint64_t>(n_tok * n_embd) * 4;
        DeviceBuffer batched(dev, bytes), alone(dev, bytes);
        dev->ffn_threshold_rows(w.gate.view(), nullptr, w.up.view(), w.down_t.view(),
                                dx->as<float>(), n_tok, threshold, kind, batched.as<float>());
        for (int64_t r = 0; r < n_tok; ++r)
          dev->ffn_threshold(w.gate.view(), nullptr, w.up.view(), w.down_t.view(),
                             dx->as<float>() + r * n_embd, 1, threshold, kind,
                             alone.as<float>() + r * n_embd);
        check(dev->sync(), "ffn_threshold_rows");
        const size_t n = static_cast<size_t>(n_tok * n_embd);
        const auto got = from_device<float>(dev, batched.as<void>(), n);
        const auto want = from_device<float>(dev, alone.as<void>(), n);
        const int64_t i = first_difference(got, want);
        ASSERT_EQ(i, -1) << describe(w, n_tok) << " kind " << static_cast<int>(kind) << ": row "
                         << i / n_embd << " output " << i % n_embd << " batched " << got[i]
                         << " alone " << want[i];
      }
    }
  }
}

TEST_F(DeviceFfn, MixedWeightTypes) {
  // As a model file holds them: gate / up of different K-quants, down_t re-quantised to Q8_0
  // (ops::down_t_type), and a float variant.
  const int64_t n_embd = 512, n_sub = 200;
  Weights k{make_matrix(dev, GgmlType::Q4_K, n_sub, n_embd, 4000),
            make_matrix(dev, GgmlType::Q6_K, n_sub, n_embd, 4001),
            make_matrix(dev, GgmlType::Q8_0, n_sub, n_embd, 4002)};
  Weights f{make_matrix(dev, GgmlType::BF16, n_sub, n_embd, 4003),
            make_matrix(dev, GgmlType::F16, n_sub, n_embd, 4004),
            make_matrix(dev, GgmlType::F32, n_sub, n_embd, 4005)};
  Weights q{make_matrix(dev, GgmlType::Q4_0, n_sub, n_embd, 4006),
            make_matrix(dev, GgmlType::Q4_1, n_sub, n_embd, 4007),
            make_matrix(dev, GgmlType::Q5_K, n_sub, n_embd, 4008)};
  for (int64_t n_tok : {1, 5, 11}) {
    run_threshold(dev, k, n_tok, ops::GluKind::kSilu, false, 4010 + n_tok);
    run_threshold(dev, f, n_tok, ops::GluKind::kRelu, true, 4020 + n_tok);
    run_threshold(dev, q, n_tok, ops::GluKind::kSilu, false, 4030 + n_tok);
    run_rows(dev, k, n_tok, 0.5, 4040 + n_tok);
    run_rows(dev, f, n_tok, 0.5, 4050 + n_tok);
    run_rows(dev, q, n_tok, 0.0, 4060 + n_tok);
  }
}

}  // namespace
}  // namespace hc::device_test
