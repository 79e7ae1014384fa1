#include "model/predictor_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>
#include <string>

namespace hc {

namespace {

// splitmix64: tiny, portable (std::normal_distribution differs between standard libraries, and
// the same seed should train the same predictor everywhere).
uint64_t next_u64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, n).
uint64_t next_below(uint64_t& s, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64(s)) * n) >> 64);
}
// Uniform in (0, 1).
double next_unit(uint64_t& s) { return (static_cast<double>(next_u64(s) >> 11) + 0.5) * 0x1.0p-53; }
double next_normal(uint64_t& s) {
  const double u1 = next_unit(s), u2 = next_unit(s);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Rows of fc2 / columns of fc1 handled together, so their slice of the weights and gradients
// stays in L2 while the batch streams past.
constexpr int64_t kTile = 64;

// Eight independent partial sums: the compiler vectorises this without reassociating floats.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

inline float round_f16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// log(1 + e^u) without overflow.
inline float softplus(float u) { return std::max(u, 0.0f) + std::log1p(std::exp(-std::fabs(u))); }
inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Forward pass of rows [b0, b1) of x [n, n_embd]: h = fc1 . x [n, rank] (pre-activation),
// a = relu(h) [n, rank], z = fc2 . a [n, n_ff].
void forward_rows(const PredictorWeights& w, const float* x, int64_t b0, int64_t b1, float* h,
                  float* a, float* z, bool round_hidden_f16) {
  const int64_t E = w.n_embd, R = w.rank, F = w.n_ff;
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t r = 0; r < R; ++r) {
      const float hv = dot(x + b * E, w.fc1.data() + r * E, E);
      const float av = hv > 0.0f ? hv : 0.0f;
      h[b * R + r] = hv;
      a[b * R + r] = round_hidden_f16 ? round_f16(av) : av;
    }
  }
  for (int64_t f0 = 0; f0 < F; f0 += kTile) {
    const int64_t f1 = std::min(F, f0 + kTile);
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t f = f0; f < f1; ++f) z[b * F + f] = dot(a + b * R, w.fc2.data() + f * R, R);
  }
}

// Buffers of one training step (kept between steps).
struct StepScratch {
  std::vector<float> h;      // [n, rank] fc1 . x
  std::vector<float> a;      // [n, rank] relu(h)
  std::vector<float> z;      // [n, n_ff] logits, then dL/dz
  std::vector<float> da;     // [n, rank] dL/da, then dL/dh
  std::vector<double> loss;  // [nth] per-thread partial sums
};

double loss_and_grad(const PredictorWeights& w, const float* x, const uint8_t* y, int64_t n,
                     float pos_weight, PredictorWeights* grad, ThreadPool& pool, StepScratch& s) {
  const int64_t E = w.n_embd, R = w.rank, F = w.n_ff;
  s.h.resize(static_cast<size_t>(n * R));
  s.a.resize(static_cast<size_t>(n * R));
  s.da.resize(static_cast<size_t>(n * R));
  s.z.resize(static_cast<size_t>(n * F));
  s.loss.assign(static_cast<size_t>(pool.size()), 0.0);
  if (grad->fc1.size() != w.fc1.size() || grad->fc2.size() != w.fc2.size())
    *grad = PredictorWeights::zeros(E, F, R);
  const float inv_n = 1.0f / static_cast<float>(n * F);

  // Pass 1, over batch rows: forward, loss, dL/dz, dL/dh. Each thread owns its rows.
  pool.run([&](int ith, int nth) {
    int64_t b0, b1;
    ThreadPool::split(n, ith, nth, &b0, &b1);
    if (b0 >= b1) return;
    float *h = s.h.data(), *a = s.a.data(), *z = s.z.data(), *da = s.da.data();
    forward_rows(w, x, b0, b1, h, a, z, false);
    // BCEWithLogits with pos_weight p: l = p y softplus(-z) + (1 - y) softplus(z),
    // dl/dz = p y (sigmoid(z) - 1) + (1 - y) sigmoid(z); mean over all n * n_ff.
    double l = 0;
    for (int64_t i = b0 * F; i < b1 * F; ++i) {
      const float zv = z[i];
      float g;
      if (y[i]) {
        l += static_cast<double>(pos_weight * softplus(-zv));
        g = pos_weight * (sigmoid(zv) - 1.0f);
      } else {
        l += static_cast<double>(softplus(zv));
        g = sigmoid(zv);
      }
      z[i] = g * inv_n;
    }
    s.loss[static_cast<size_t>(ith)] = l;
    std::fill(da + b0 * R, da + b1 * R, 0.0f);
    for (int64_t f0 = 0; f0 < F; f0 += kTile) {
      const int64_t f1 = std::min(F, f0 + kTile);
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t f = f0; f < f1; ++f) axpy(da + b * R, z[b * F + f], w.fc2.data() + f * R, R);
    }
    for (int64_t i = b0 * R; i < b1 * R; ++i)
      if (!(h[i] > 0.0f)) da[i] = 0.0f;  // relu': da becomes dL/dh
  });

  // Pass 2, over weight rows / columns: dfc2 = dz^T a (thread owns rows of fc2),
  // dfc1 = dh^T x (thread owns columns of fc1). The batch is summed in order 0 .. n - 1.
  pool.run([&](int ith, int nth) {
    const float *a = s.a.data(), *dz = s.z.data(), *dh = s.da.data();
    int64_t f0, f1;
    ThreadPool::split(F, ith, nth, &f0, &f1);
    float* g2 = grad->fc2.data();
    std::fill(g2 + f0 * R, g2 + f1 * R, 0.0f);
    for (int64_t t0 = f0; t0 < f1; t0 += kTile) {
      const int64_t t1 = std::min(f1, t0 + kTile);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t f = t0; f < t1; ++f) axpy(g2 + f * R, dz[b * F + f], a + b * R, R);
    }
    int64_t e0, e1;
    ThreadPool::split(E, ith, nth, &e0, &e1);
    float* g1 = grad->fc1.data();
    for (int64_t r = 0; r < R; ++r) std::fill(g1 + r * E + e0, g1 + r * E + e1, 0.0f);
    for (int64_t t0 = e0; t0 < e1; t0 += kTile) {
      const int64_t t1 = std::min(e1, t0 + kTile);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t r = 0; r < R; ++r) {
          const float g = dh[b * R + r];
          if (g != 0.0f) axpy(g1 + r * E + t0, g, x + b * E + t0, t1 - t0);
        }
      }
    }
  });
  double l = 0;
  for (double v : s.loss) l += v;
  return l / static_cast<double>(n * F);
}

// Adam (beta1 0.9, beta2 0.999, eps 1e-8; PyTorch's update) on fc1 and fc2, each thread updating
// its own slice of the elements.
struct AdamState {
  std::vector<float> m1, v1, m2, v2;  // first / second moments of fc1, fc2
  int64_t t = 0;

  void step(PredictorWeights& w, const PredictorWeights& g, float lr, ThreadPool& pool) {
    if (m1.empty()) {
      m1.assign(w.fc1.size(), 0.0f);
      v1.assign(w.fc1.size(), 0.0f);
      m2.assign(w.fc2.size(), 0.0f);
      v2.assign(w.fc2.size(), 0.0f);
    }
    ++t;
    update(w.fc1, g.fc1, m1, v1, lr, pool);
    update(w.fc2, g.fc2, m2, v2, lr, pool);
  }

 private:
  void update(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
              std::vector<float>& v, float lr, ThreadPool& pool) const {
    constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const auto bc1 = static_cast<float>(1.0 - std::pow(0.9, static_cast<double>(t)));
    const auto bc2 = static_cast<float>(1.0 - std::pow(0.999, static_cast<double>(t)));
    pool.run([&](int ith, int nth) {
      int64_t i0, i1;
      ThreadPool::split(static_cast<int64_t>(p.size()), ith, nth, &i0, &i1);
      for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
      }
    });
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Samples [i0, i1) of s (in `order` when given), decoded: x [n, n_embd], y [n, n_ff].
void decode(const PredictorSamples& s, const int64_t* order, int64_t i0, int64_t i1,
            std::vector<float>* x, std::vector<uint8_t>* y) {
  const int64_t n = i1 - i0, E = s.n_embd(), F = s.n_ff();
  x->resize(static_cast<size_t>(n * E));
  y->resize(static_cast<size_t>(n * F));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = order ? order[i0 + k] : i0 + k;
    s.x(i, x->data() + k * E);
    s.mask(i, y->data() + k * F);
  }
}

}  // namespace

// ---- samples ----

PredictorSamples::PredictorSamples(int64_t n_embd, int64_t n_ff, int64_t capacity, uint64_t seed)
    : n_embd_(n_embd), n_ff_(n_ff), capacity_(capacity), words_((n_ff + 63) / 64), rng_(seed) {
  HC_CHECK(n_embd > 0 && n_ff > 0 && capacity > 0);
}

uint64_t PredictorSamples::bytes_for(int64_t n_embd, int64_t n_ff, int64_t capacity) {
  return static_cast<uint64_t>(capacity) * static_cast<uint64_t>(n_embd * 2 + (n_ff + 63) / 64 * 8);
}

int64_t PredictorSamples::slot_for_next() {
  ++seen_;
  if (size_ < capacity_) {
    ++size_;
    x_.resize(static_cast<size_t>(size_ * n_embd_));
    mask_.resize(static_cast<size_t>(size_ * words_));
    return size_ - 1;
  }
  const auto j = static_cast<int64_t>(next_below(rng_, static_cast<uint64_t>(seen_)));
  return j < capacity_ ? j : -1;
}

void PredictorSamples::offer(const float* x, const float* act, float threshold) {
  const int64_t slot = slot_for_next();
  if (slot < 0) return;
  fp16_t* xd = x_.data() + slot * n_embd_;
  for (int64_t e = 0; e < n_embd_; ++e) xd[e] = fp32_to_fp16(x[e]);
  uint64_t* m = mask_.data() + slot * words_;
  std::fill(m, m + words_, uint64_t{0});
  for (int64_t j = 0; j < n_ff_; ++j)
    if (std::fabs(act[j]) > threshold) m[j / 64] |= uint64_t{1} << (j % 64);
}

void PredictorSamples::x(int64_t i, float* out) const {
  const fp16_t* xd = x_.data() + i * n_embd_;
  for (int64_t e = 0; e < n_embd_; ++e) out[e] = fp16_to_fp32(xd[e]);
}

void PredictorSamples::mask(int64_t i, uint8_t* out) const {
  for (int64_t j = 0; j < n_ff_; ++j) out[j] = fired(i, j) ? 1 : 0;
}

PredictorSampler::PredictorSampler(int64_t n_embd, int64_t n_ff, std::vector<float> thresholds,
                                   int64_t capacity, uint64_t seed)
    : thresholds_(std::move(thresholds)) {
  for (size_t il = 0; il < thresholds_.size(); ++il)
    layers_.emplace_back(n_embd, n_ff, capacity, seed);
}

void PredictorSampler::on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) {
  HC_CHECK(il >= 0 && il < n_layer() && n_embd == layers_[static_cast<size_t>(il)].n_embd());
  x_.assign(x, x + n_tok * n_embd);
  x_layer_ = il;
  x_tok_ = n_tok;
}

void PredictorSampler::on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) {
  // The forward pass announces each layer's input before its activations.
  HC_CHECK(il == x_layer_ && n_tok == x_tok_);
  PredictorSamples& s = layers_[static_cast<size_t>(il)];
  HC_CHECK(n_ff == s.n_ff());
  for (int64_t t = 0; t < n_tok; ++t)
    s.offer(x_.data() + t * s.n_embd(), act + t * n_ff, thresholds_[static_cast<size_t>(il)]);
  x_layer_ = -1;
}

// ---- weights ----

PredictorWeights PredictorWeights::zeros(int64_t n_embd, int64_t n_ff, int64_t rank) {
  PredictorWeights w;
  w.n_embd = n_embd;
  w.n_ff = n_ff;
  w.rank = rank;
  w.fc1.assign(static_cast<size_t>(rank * n_embd), 0.0f);
  w.fc2.assign(static_cast<size_t>(n_ff * rank), 0.0f);
  return w;
}

PredictorWeights PredictorWeights::init(int64_t n_embd, int64_t n_ff, int64_t rank, uint64_t seed) {
  PredictorWeights w = zeros(n_embd, n_ff, rank);
  uint64_t rng = seed ^ 0x5DEECE66Dull;
  const double he = std::sqrt(2.0 / static_cast<double>(n_embd));
  for (float& v : w.fc1) v = static_cast<float>(he * next_normal(rng));
  const double xavier = std::sqrt(6.0 / static_cast<double>(rank + n_ff));
  for (float& v : w.fc2) v = static_cast<float>(xavier * (2.0 * next_unit(rng) - 1.0));
  return w;
}

void PredictorWeights::round_to_f16() {
  for (float& v : fc1) v = round_f16(v);
  for (float& v : fc2) v = round_f16(v);
}

int64_t default_predictor_rank(int64_t n_embd, int64_t n_ff) {
  return std::min(n_ff, std::max<int64_t>(64, n_embd / 4));
}

void predictor_logits(const PredictorWeights& w, const float* x, int64_t n, float* logits,
                      ThreadPool& pool, bool round_hidden_f16) {
  std::vector<float> h(static_cast<size_t>(n * w.rank)), a(h.size());
  pool.run([&](int ith, int nth) {
    int64_t b0, b1;
    ThreadPool::split(n, ith, nth, &b0, &b1);
    if (b0 < b1) forward_rows(w, x, b0, b1, h.data(), a.data(), logits, round_hidden_f16);
  });
}

double predictor_loss_and_grad(const PredictorWeights& w, const float* x, const uint8_t* y,
                               int64_t n, float pos_weight, PredictorWeights* grad,
                               ThreadPool& pool) {
  StepScratch s;
  return loss_and_grad(w, x, y, n, pos_weight, grad, pool, s);
}

// ---- thresholds ----

PredictorMetrics evaluate_threshold(std::span<const float> logits, std::span<const uint8_t> fired,
                                    float threshold) {
  HC_CHECK(logits.size() == fired.size());
  PredictorMetrics m;
  m.threshold = threshold;
  m.total = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool p = logits[i] >= threshold, f = fired[i] != 0;
    m.predicted += p;
    m.fired += f;
    m.hits += p && f;
  }
  if (m.fired > 0) m.recall = static_cast<double>(m.hits) / static_cast<double>(m.fired);
  if (m.predicted > 0) m.precision = static_cast<double>(m.hits) / static_cast<double>(m.predicted);
  if (m.total > 0) {
    m.predicted_sparsity = 1.0 - static_cast<double>(m.predicted) / static_cast<double>(m.total);
    m.true_sparsity = 1.0 - static_cast<double>(m.fired) / static_cast<double>(m.total);
  }
  return m;
}

PredictorMetrics choose_threshold(std::span<const float> logits, std::span<const uint8_t> fired,
                                  double target_recall) {
  HC_CHECK(logits.size() == fired.size());
  std::vector<float> pos;
  for (size_t i = 0; i < logits.size(); ++i)
    if (fired[i]) pos.push_back(logits[i]);
  if (pos.empty()) {
    const float mx = logits.empty() ? 0.0f : *std::max_element(logits.begin(), logits.end());
    return evaluate_threshold(logits, fired, std::nextafter(mx, std::numeric_limits<float>::infinity()));
  }
  // The k-th largest firing logit must be predicted (logit >= threshold): it is the largest
  // such threshold.
  const auto n = static_cast<int64_t>(pos.size());
  int64_t k = static_cast<int64_t>(std::ceil(target_recall * static_cast<double>(n) - 1e-9));
  k = std::clamp<int64_t>(k, 1, n);
  std::nth_element(pos.begin(), pos.begin() + (k - 1), pos.end(), std::greater<float>());
  const float v = pos[static_cast<size_t>(k - 1)];
  return evaluate_threshold(logits, fired, v);
}

// ---- training ----

Result<TrainedPredictor> train_layer(const PredictorSamples& s, const PredictorTrainOptions& opt,
                                     ThreadPool& pool,
                                     const std::function<void(const PredictorEpoch&)>& on_epoch) {
  if (!(opt.held_out > 0.0 && opt.held_out < 1.0))
    return Status::Error("held-out share: expected a value in (0, 1), found " +
                         std::to_string(opt.held_out));
  if (!(opt.target_recall > 0.0 && opt.target_recall <= 1.0))
    return Status::Error("target recall: expected a value in (0, 1], found " +
                         std::to_string(opt.target_recall));
  if (opt.epochs < 1 || opt.batch < 1 || !(opt.lr > 0.0f) || opt.rank < 0)
    return Status::Error("training options: expected epochs >= 1, batch >= 1, lr > 0, rank >= 0");
  const int64_t n = s.size();
  const int64_t n_held = std::max<int64_t>(1, std::llround(static_cast<double>(n) * opt.held_out));
  const int64_t n_train = n - n_held;
  if (n_train < 1)
    return Status::Error("need at least 2 samples to train and hold out, found " +
                         std::to_string(n));
  const int64_t E = s.n_embd(), F = s.n_ff();
  const int64_t R = opt.rank > 0 ? opt.rank : default_predictor_rank(E, F);

  TrainedPredictor out;
  out.n_train = n_train;
  out.n_held_out = n_held;
  if (opt.pos_weight > 0.0f) {
    out.pos_weight = opt.pos_weight;
  } else {
    int64_t pos = 0;
    for (int64_t i = 0; i < n_train; ++i)
      for (int64_t j = 0; j < F; ++j) pos += s.fired(i, j);
    const double neg = static_cast<double>(n_train * F - pos);
    out.pos_weight =
        pos > 0 ? static_cast<float>(std::min(20.0, neg / static_cast<double>(pos))) : 1.0f;
  }

  PredictorWeights w = PredictorWeights::init(E, F, R, opt.seed);
  PredictorWeights grad = PredictorWeights::zeros(E, F, R);
  AdamState adam;
  StepScratch scratch;
  std::vector<float> hx, hl(static_cast<size_t>(n_held * F)), bx;
  std::vector<uint8_t> hy, by;
  decode(s, nullptr, n_train, n, &hx, &hy);
  std::vector<int64_t> order(static_cast<size_t>(n_train));
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t rng = opt.seed ^ 0x2545F4914F6CDD1Dull;
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
    for (int64_t i = n_train - 1; i > 0; --i)  // Fisher-Yates
      std::swap(order[static_cast<size_t>(i)],
                order[next_below(rng, static_cast<uint64_t>(i + 1))]);
    double loss_sum = 0;
    for (int64_t b0 = 0; b0 < n_train; b0 += opt.batch) {
      const int64_t b1 = std::min(n_train, b0 + opt.batch);
      decode(s, order.data(), b0, b1, &bx, &by);
      const double l =
          loss_and_grad(w, bx.data(), by.data(), b1 - b0, out.pos_weight, &grad, pool, scratch);
      loss_sum += l * static_cast<double>(b1 - b0);
      adam.step(w, grad, opt.lr, pool);
    }
    if (on_epoch) {
      PredictorEpoch e;
      e.epoch = epoch;
      e.loss = loss_sum / static_cast<double>(n_train);
      predictor_logits(w, hx.data(), n_held, hl.data(), pool);
      e.held_out = evaluate_threshold(hl, hy, 0.0f);
      e.seconds = seconds_since(t0);
      on_epoch(e);
    }
  }
  // The threshold is chosen for the weights the file will hold, computed as the engine does.
  w.round_to_f16();
  predictor_logits(w, hx.data(), n_held, hl.data(), pool, /*round_hidden_f16=*/true);
  out.held_out = choose_threshold(hl, hy, opt.target_recall);
  out.w = std::move(w);
  return out;
}

}  // namespace hc
