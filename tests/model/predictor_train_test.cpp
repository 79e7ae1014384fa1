// Activation-predictor training (model/predictor_train.h): the weighted-BCE gradients against
// finite differences, training on a synthetic layer whose firing is a known function of x,
// the threshold choice, the sample store, and determinism.
#include "model/predictor_train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace hc {
namespace {

std::vector<float> normals(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The loss of predictor_loss_and_grad, recomputed independently in double.
double reference_loss(const PredictorWeights& w, const float* x, const uint8_t* y, int64_t n,
                      double pos_weight) {
  double l = 0;
  for (int64_t b = 0; b < n; ++b) {
    std::vector<double> a(static_cast<size_t>(w.rank));
    for (int64_t r = 0; r < w.rank; ++r) {
      double h = 0;
      for (int64_t e = 0; e < w.n_embd; ++e)
        h += double{w.fc1[r * w.n_embd + e]} * x[b * w.n_embd + e];
      a[r] = h > 0 ? h : 0;
    }
    for (int64_t f = 0; f < w.n_ff; ++f) {
      double z = 0;
      for (int64_t r = 0; r < w.rank; ++r) z += double{w.fc2[f * w.rank + r]} * a[r];
      const double sig = 1 / (1 + std::exp(-z));
      l += y[b * w.n_ff + f] ? -pos_weight * std::log(sig) : -std::log(1 - sig);
    }
  }
  return l / static_cast<double>(n * w.n_ff);
}

TEST(PredictorTrain, GradientsMatchFiniteDifferences) {
  const int64_t E = 6, F = 5, R = 4, n = 7;
  const float pos_weight = 3.0f;
  PredictorWeights w = PredictorWeights::init(E, F, R, 11);
  const std::vector<float> x = normals(static_cast<size_t>(n * E), 3);
  std::vector<uint8_t> y(static_cast<size_t>(n * F));
  std::mt19937 rng(5);
  for (auto& v : y) v = rng() % 3 == 0;
  ThreadPool pool(2);
  PredictorWeights g;
  const double loss = predictor_loss_and_grad(w, x.data(), y.data(), n, pos_weight, &g, pool);
  EXPECT_NEAR(loss, reference_loss(w, x.data(), y.data(), n, pos_weight), 1e-5);

  const double eps = 1e-3;
  auto check = [&](std::vector<float>& p, const std::vector<float>& gp, const char* what) {
    ASSERT_EQ(p.size(), gp.size());
    int n_nonzero = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const float keep = p[i];
      p[i] = static_cast<float>(keep + eps);
      const double lp = reference_loss(w, x.data(), y.data(), n, pos_weight);
      p[i] = static_cast<float>(keep - eps);
      const double lm = reference_loss(w, x.data(), y.data(), n, pos_weight);
      p[i] = keep;
      const double fd = (lp - lm) / (2 * eps);
      EXPECT_NEAR(gp[i], fd, 1e-4 + 1e-2 * std::fabs(fd)) << what << "[" << i << "]";
      n_nonzero += std::fabs(fd) > 1e-4;
    }
    EXPECT_GT(n_nonzero, static_cast<int>(p.size()) / 2) << what;
  };
  check(w.fc1, g.fc1, "fc1");
  check(w.fc2, g.fc2, "fc2");

  // The same gradients, bit for bit, on any number of threads.
  for (int nth : {1, 3, 8}) {
    ThreadPool p(nth);
    PredictorWeights g2;
    predictor_loss_and_grad(w, x.data(), y.data(), n, pos_weight, &g2, p);
    EXPECT_EQ(g2.fc1, g.fc1) << nth;
    EXPECT_EQ(g2.fc2, g.fc2) << nth;
  }
}

// A layer whose neuron i fires iff w_i . x > 0, with the w_i spanning an 8-dimensional
// subspace (so a rank-16 ReLU predictor can represent it: u = relu(u) - relu(-u)).
struct SyntheticLayer {
  static constexpr int64_t E = 32, F = 48, K = 8;
  std::vector<float> wf;  // [F, E]
  SyntheticLayer() {
    const std::vector<float> u = normals(K * E, 21), c = normals(F * K, 22);
    wf.assign(F * E, 0.0f);
    for (int64_t i = 0; i < F; ++i)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t e = 0; e < E; ++e) wf[i * E + e] += c[i * K + k] * u[k * E + e];
  }
  // act: the ReLU of w_i . x (fires iff > 0).
  void act(const float* x, float* out) const {
    for (int64_t i = 0; i < F; ++i) {
      float s = 0;
      for (int64_t e = 0; e < E; ++e) s += wf[i * E + e] * x[e];
      out[i] = s > 0 ? s : 0;
    }
  }
  PredictorSamples samples(int64_t n, uint32_t seed) const {
    PredictorSamples s(E, F, n, 1);
    const std::vector<float> x = normals(static_cast<size_t>(n * E), seed);
    std::vector<float> a(F);
    for (int64_t t = 0; t < n; ++t) {
      act(&x[t * E], a.data());
      s.offer(&x[t * E], a.data(), 0.0f);
    }
    return s;
  }
};

PredictorTrainOptions synthetic_options() {
  PredictorTrainOptions o;
  o.rank = 16;
  o.epochs = 20;
  o.lr = 1e-2f;
  o.batch = 64;
  o.seed = 7;
  return o;
}

TEST(PredictorTrain, LearnsALinearFiringRule) {
  const SyntheticLayer layer;
  const PredictorSamples s = layer.samples(3000, 1);
  ThreadPool pool(2);
  std::vector<PredictorEpoch> epochs;
  auto r = train_layer(s, synthetic_options(), pool,
                       [&](const PredictorEpoch& e) { epochs.push_back(e); });
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(epochs.size(), 20u);
  EXPECT_LT(epochs.back().loss, 0.5 * epochs.front().loss);
  // Held out, at logit >= 0 (the rule's own threshold).
  printf(
      "epoch %d loss %.4f (first %.4f) held-out@0 recall %.4f precision %.4f; chosen threshold "
      "%g recall %.4f precision %.4f\n",
      epochs.back().epoch, epochs.back().loss, epochs.front().loss, epochs.back().held_out.recall,
      epochs.back().held_out.precision, r->held_out.threshold, r->held_out.recall,
      r->held_out.precision);
  EXPECT_GE(epochs.back().held_out.recall, 0.95);
  EXPECT_GE(epochs.back().held_out.precision, 0.95);
  EXPECT_EQ(r->n_held_out, 300);
  EXPECT_EQ(r->n_train, 2700);
  EXPECT_NEAR(r->pos_weight, 1.0, 0.2);  // about half the neurons fire
  // At the chosen threshold: the target recall on the held-out split, by construction, and
  // a precision that shows the predictor is not just predicting everything.
  EXPECT_GE(r->held_out.recall, 0.99);
  EXPECT_GE(r->held_out.precision, 0.95);
  EXPECT_NEAR(r->held_out.true_sparsity, 0.5, 0.05);

  // Fresh samples from the same distribution, with the file's (F16) weights.
  const PredictorSamples test = layer.samples(1000, 99);
  std::vector<float> x(static_cast<size_t>(test.size() * test.n_embd()));
  std::vector<uint8_t> y(static_cast<size_t>(test.size() * test.n_ff()));
  for (int64_t i = 0; i < test.size(); ++i) {
    test.x(i, &x[i * test.n_embd()]);
    test.mask(i, &y[i * test.n_ff()]);
  }
  std::vector<float> logits(y.size());
  predictor_logits(r->w, x.data(), test.size(), logits.data(), pool, true);
  const PredictorMetrics m = evaluate_threshold(logits, y, r->held_out.threshold);
  printf("fresh samples: recall %.4f precision %.4f\n", m.recall, m.precision);
  EXPECT_GE(m.recall, 0.97);
  EXPECT_GE(m.precision, 0.95);
  // The weights are the F16 values the file holds.
  for (float v : r->w.fc2) EXPECT_EQ(v, fp16_to_fp32(fp32_to_fp16(v)));
}

TEST(PredictorTrain, DeterministicForASeed) {
  const SyntheticLayer layer;
  const PredictorSamples s = layer.samples(600, 2);
  PredictorTrainOptions o = synthetic_options();
  o.epochs = 3;
  ThreadPool p1(1), p3(3);
  auto a = train_layer(s, o, p1);
  auto b = train_layer(s, o, p3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->w.fc1, b->w.fc1);
  EXPECT_EQ(a->w.fc2, b->w.fc2);
  EXPECT_EQ(a->held_out.threshold, b->held_out.threshold);
  o.seed = 8;
  auto c = train_layer(s, o, p1);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->w.fc1, c->w.fc1);
}

TEST(PredictorTrain, BadOptionsAndTooFewSamplesAreErrors) {
  const SyntheticLayer layer;
  ThreadPool pool(1);
  PredictorTrainOptions o = synthetic_options();
  EXPECT_FALSE(train_layer(layer.samples(1, 3), o, pool).ok());
  const PredictorSamples s = layer.samples(50, 3);
  o.held_out = 1.0;
  EXPECT_FALSE(train_layer(s, o, pool).ok());
  o = synthetic_options();
  o.target_recall = 0.0;
  EXPECT_FALSE(train_layer(s, o, pool).ok());
  o = synthetic_options();
  o.lr = 0;
  EXPECT_FALSE(train_layer(s, o, pool).ok());
}

TEST(PredictorTrain, ChooseThresholdIsTheLargestMeetingTheTarget) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 1);
  const size_t n = 5000;
  std::vector<float> logits(n);
  std::vector<uint8_t> fired(n);
  for (size_t i = 0; i < n; ++i) {
    fired[i] = rng() % 4 == 0;
    logits[i] = d(rng) + (fired[i] ? 1.5f : -1.5f);
  }
  for (double target : {0.5, 0.9, 0.99, 0.999, 1.0}) {
    const PredictorMetrics m = choose_threshold(logits, fired, target);
    EXPECT_GE(m.recall, target) << target;
    const float above = std::nextafter(m.threshold, INFINITY);
    EXPECT_LT(evaluate_threshold(logits, fired, above).recall, target) << target;
    EXPECT_GT(m.precision, 0.0);
    EXPECT_EQ(m.total, static_cast<int64_t>(n));
    EXPECT_NEAR(m.predicted_sparsity, 1.0 - double(m.predicted) / n, 1e-12);
    EXPECT_NEAR(m.true_sparsity, 1.0 - double(m.fired) / n, 1e-12);
  }
  // Hand-checked: fired logits 3, 2, 1; target 2/3 keeps 3 and 2.
  const std::vector<float> l = {3, 1.5f, 2, 1, -1};
  const std::vector<uint8_t> f = {1, 0, 1, 1, 0};
  PredictorMetrics m = choose_threshold(l, f, 2.0 / 3.0);
  EXPECT_EQ(m.threshold, 2.0f);  // predicted: logit >= threshold (PowerInfer's rule)
  EXPECT_EQ(m.hits, 2);
  EXPECT_EQ(m.predicted, 2);
  EXPECT_DOUBLE_EQ(m.precision, 1.0);
  EXPECT_DOUBLE_EQ(m.predicted_sparsity, 0.6);
  EXPECT_DOUBLE_EQ(m.true_sparsity, 0.4);
  m = choose_threshold(l, f, 0.99);
  EXPECT_EQ(m.hits, 3);
  EXPECT_EQ(m.predicted, 4);  // 1.5 is above the threshold 1
  EXPECT_DOUBLE_EQ(m.precision, 0.75);
  // Nothing fired: nothing is predicted.
  m = choose_threshold(l, std::vector<uint8_t>(5, 0), 0.99);
  EXPECT_EQ(m.predicted, 0);
  EXPECT_DOUBLE_EQ(m.predicted_sparsity, 1.0);
}

TEST(PredictorSamples, ReservoirKeepsCapacityAndMasks) {
  const int64_t E = 5, F = 70;  // two mask words
  PredictorSamples s(E, F, 10, 4);
  std::vector<float> x(E), act(F);
  for (int t = 0; t < 100; ++t) {
    for (int64_t e = 0; e < E; ++e) x[e] = static_cast<float>(t) + 0.25f * e;
    for (int64_t j = 0; j < F; ++j) act[j] = (j % 7 == t % 7) ? -0.5f : 0.1f;
    s.offer(x.data(), act.data(), 0.2f);  // |act| > 0.2: the neurons j = t mod 7
  }
  EXPECT_EQ(s.size(), 10);
  EXPECT_EQ(s.seen(), 100);
  int late = 0;
  std::vector<float> xi(E);
  for (int64_t i = 0; i < s.size(); ++i) {
    s.x(i, xi.data());
    const int t = static_cast<int>(xi[0]);
    late += t >= 10;
    EXPECT_EQ(xi[1], static_cast<float>(t) + 0.25f);
    for (int64_t j = 0; j < F; ++j) EXPECT_EQ(s.fired(i, j), j % 7 == t % 7) << i << " " << j;
  }
  EXPECT_GT(late, 5);  // the reservoir moved on past the first ten tokens
  PredictorSamples s2(E, F, 10, 4);
  for (int t = 0; t < 100; ++t) {
    for (int64_t e = 0; e < E; ++e) x[e] = static_cast<float>(t) + 0.25f * e;
    s2.offer(x.data(), act.data(), 0.2f);
  }
  for (int64_t i = 0; i < s.size(); ++i) {
    std::vector<float> a(E), b(E);
    s.x(i, a.data());
    s2.x(i, b.data());
    EXPECT_EQ(a, b);
  }
}

TEST(PredictorSampler, PairsEachLayersInputWithItsActivations) {
  PredictorSampler obs(3, 4, {0.0f, 1.0f}, 100, 1);
  const std::vector<float> x0 = {1, 2, 3, 4, 5, 6}, x1 = {7, 8, 9, 10, 11, 12};
  const std::vector<float> a0 = {0, 1, 0, 2, 3, 0, 0, 0}, a1 = {0.5f, 1.5f, -2, 0, 0, 0, 0, 9};
  obs.on_ffn_input(0, x0.data(), 2, 3);
  obs.on_ffn_activation(0, a0.data(), 2, 4);
  obs.on_ffn_input(1, x1.data(), 2, 3);
  obs.on_ffn_activation(1, a1.data(), 2, 4);
  ASSERT_EQ(obs.n_layer(), 2);
  ASSERT_EQ(obs.layer(0).size(), 2);
  ASSERT_EQ(obs.layer(1).size(), 2);
  std::vector<float> x(3);
  std::vector<uint8_t> m(4);
  obs.layer(1).x(1, x.data());
  EXPECT_EQ(x, std::vector<float>({10, 11, 12}));
  obs.layer(0).mask(0, m.data());
  EXPECT_EQ(m, std::vector<uint8_t>({0, 1, 0, 1}));
  obs.layer(1).mask(0, m.data());  // threshold 1 on |act|
  EXPECT_EQ(m, std::vector<uint8_t>({0, 1, 1, 0}));
  obs.layer(1).mask(1, m.data());
  EXPECT_EQ(m, std::vector<uint8_t>({0, 0, 0, 1}));
}

}  // namespace
}  // namespace hc
