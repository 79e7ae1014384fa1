// ActStats: exact firing counts and |act| sums from known activations, histogram bins, the
// threshold calibration reproducing a requested sparsity, neurons_covering on a constructed
// power law, and the statistics file (round trip, and clear errors for wrong files).
#include "model/act_stats.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

#include "format/gguf.h"

namespace hc {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "hotcold_actstats_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

double hist_total(const ActStats& s, int il) {
  const auto& h = s.act_hist(il);
  return std::accumulate(h.begin(), h.end(), 0.0);
}

TEST(ActStats, KnownActivationsGiveExactCountsAndSums) {
  ActStats s(2, 4, FfnActivation::kRelu);
  // [n_tok = 2, n_ff = 4]
  const float l0[] = {0.0f, 1.0f, 0.0f, 2.0f,  //
                      3.0f, 0.0f, 0.0f, -0.5f};
  const float l1[] = {0.25f, 0.0f, 0.0f, 0.0f,  //
                      0.0f,  0.0f, 0.0f, 0.0f};
  s.on_ffn_activation(0, l0, 2, 4);
  s.on_ffn_activation(1, l1, 2, 4);
  EXPECT_EQ(s.n_tokens(), 2u);
  EXPECT_EQ(s.fire_count(0), (std::vector<float>{1, 1, 0, 2}));
  EXPECT_EQ(s.act_abs_sum(0), (std::vector<float>{3, 1, 0, 2.5f}));
  EXPECT_EQ(s.fire_count(1), (std::vector<float>{1, 0, 0, 0}));
  EXPECT_EQ(s.act_hist(0)[0], 4.0);  // exact zeros
  EXPECT_EQ(s.act_hist(1)[0], 7.0);
  EXPECT_EQ(hist_total(s, 0), 8.0);
  EXPECT_DOUBLE_EQ(s.firing_share(0), 4.0 / 8.0);

  // Thresholds count only |act| above them; the 0.5 no longer fires.
  s.set_thresholds({0.75f, 0.0f});
  s.on_ffn_activation(0, l0, 2, 4);
  s.on_ffn_activation(1, l1, 2, 4);
  EXPECT_EQ(s.n_tokens(), 4u);
  EXPECT_EQ(s.fire_count(0), (std::vector<float>{2, 2, 0, 3}));
  EXPECT_EQ(s.act_abs_sum(0), (std::vector<float>{6, 2, 0, 5}));

  // Not counting: the histogram grows, nothing else does.
  s.set_counting(false);
  s.on_ffn_activation(0, l0, 2, 4);
  s.on_ffn_activation(1, l1, 2, 4);
  EXPECT_EQ(s.n_tokens(), 4u);
  EXPECT_EQ(s.n_tokens_hist(), 6u);
  EXPECT_EQ(s.fire_count(0), (std::vector<float>{2, 2, 0, 3}));
  EXPECT_EQ(s.act_abs_sum(0), (std::vector<float>{6, 2, 0, 5}));
  EXPECT_EQ(hist_total(s, 0), 24.0);
  EXPECT_EQ(s.act_hist(0)[0], 12.0);
}

TEST(ActStats, BinsMatchTheirEdges) {
  ActStats s(1, 1, FfnActivation::kSilu);
  const int nb = s.hist_n_bins();
  EXPECT_EQ(nb, ActStats::kDefaultHistBins);
  EXPECT_EQ(s.bin_of(0.0f), 0);
  EXPECT_EQ(s.bin_of(1e-7f), 1);
  EXPECT_EQ(s.bin_of(1e4f), nb - 1);
  EXPECT_EQ(s.bin_of(INFINITY), nb - 1);
  EXPECT_EQ(s.bin_of(NAN), nb - 1);
  // 1 = 1e-6 * 10^(600/100): bin 2 + 600 or its lower neighbour, by float rounding of the edge.
  EXPECT_NEAR(s.bin_of(1.0f), 602, 1);
  EXPECT_NEAR(s.bin_upper(602) / s.bin_lower(602), std::pow(10.0, 0.01), 1e-6);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> e(-8.0, 4.0);
  std::vector<float> probes;
  for (int i = 0; i < 20000; ++i) probes.push_back(static_cast<float>(std::pow(10.0, e(rng))));
  for (int b = 2; b < nb; ++b) {  // every edge and its float neighbours
    const float edge = static_cast<float>(s.bin_lower(b));
    probes.insert(probes.end(), {edge, std::nextafter(edge, 0.0f), std::nextafter(edge, INFINITY)});
  }
  for (float a : probes) {
    const int b = s.bin_of(a);
    ASSERT_GE(b, 1) << a;
    ASSERT_LT(b, nb) << a;
    EXPECT_LE(s.bin_lower(b), a) << a << " in bin " << b;
    EXPECT_LT(a, s.bin_upper(b)) << a << " in bin " << b;
  }
}

// 10% exact zeros, the rest log-uniform in [1e-4, 10] with random signs; layer 1 is layer 0
// times 100, so its thresholds must be 100 times larger.
std::vector<float> silu_like(int64_t n_tok, int64_t n_ff, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0), e(-4.0, 1.0);
  std::vector<float> v(static_cast<size_t>(n_tok * n_ff));
  for (float& x : v) {
    if (u(rng) < 0.1)
      x = 0.0f;
    else
      x = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::pow(10.0, e(rng)));
  }
  return v;
}

double share_at_or_below(const std::vector<float>& v, double t) {
  size_t n = 0;
  for (float x : v) n += std::fabs(x) <= t ? 1 : 0;
  return static_cast<double>(n) / static_cast<double>(v.size());
}

TEST(ActStats, ThresholdsReproduceTheRequestedSparsity) {
  const int64_t n_tok = 300, n_ff = 256;
  const std::vector<float> a0 = silu_like(n_tok, n_ff, 1);
  std::vector<float> a1 = a0;
  for (float& x : a1) x *= 100.0f;
  ActStats s(2, n_ff, FfnActivation::kSilu);
  s.set_counting(false);
  // In forward-sized pieces, as the forward pass calls it.
  for (int64_t t0 = 0; t0 < n_tok; t0 += 128) {
    const int64_t n = std::min<int64_t>(128, n_tok - t0);
    s.on_ffn_activation(0, a0.data() + t0 * n_ff, n, n_ff);
    s.on_ffn_activation(1, a1.data() + t0 * n_ff, n, n_ff);
  }
  std::vector<float> sorted(a0.size());
  std::transform(a0.begin(), a0.end(), sorted.begin(), [](float x) { return std::fabs(x); });
  std::sort(sorted.begin(), sorted.end());
  const double bin_log10 = 1.0 / s.hist_bins_per_decade();

  // The zeros alone cover 5%: threshold 0.
  EXPECT_EQ(s.thresholds_for_sparsity(0.05)[0], 0.0f);
  EXPECT_EQ(s.thresholds_for_sparsity(0.0)[1], 0.0f);
  for (double sp : {0.2, 0.5, 0.8, 0.9, 0.99}) {
    SCOPED_TRACE(sp);
    const std::vector<float> t = s.thresholds_for_sparsity(sp);
    ASSERT_EQ(t.size(), 2u);
    // The requested share of the recorded data is at or below t, to within one bin's mass
    // (~0.2% here: 90% of the data over 500 bins).
    EXPECT_NEAR(share_at_or_below(a0, t[0]), sp, 0.004);
    EXPECT_NEAR(share_at_or_below(a1, t[1]), sp, 0.004);
    // And t lies within one bin of the exact empirical quantile.
    const float q = sorted[static_cast<size_t>(std::ceil(sp * sorted.size())) - 1];
    EXPECT_NEAR(std::log10(t[0]), std::log10(q), bin_log10 + 1e-6);
    EXPECT_NEAR(std::log10(t[1]), std::log10(q) + 2.0, bin_log10 + 1e-6);

    // Counting with those thresholds gives a firing share of 1 - sparsity.
    ActStats c(2, n_ff, FfnActivation::kSilu);
    c.set_thresholds(t);
    c.on_ffn_activation(0, a0.data(), n_tok, n_ff);
    c.on_ffn_activation(1, a1.data(), n_tok, n_ff);
    EXPECT_NEAR(c.firing_share(0), 1.0 - sp, 0.004);
    EXPECT_NEAR(c.firing_share(1), 1.0 - sp, 0.004);
  }
}

TEST(ActStats, ThresholdsInterpolateGeometricallyWithinABin) {
  // All values log-uniform inside one bin, plus 20% zeros: the interpolation's assumption holds,
  // so thresholds land on the exact quantiles far closer than a bin width.
  ActStats s(1, 1000, FfnActivation::kSilu);
  const int b = s.bin_of(0.05f);
  const double lo = s.bin_lower(b), hi = s.bin_upper(b);
  std::vector<float> v(1000, 0.0f);  // [n_tok = 1, n_ff = 1000]
  for (int i = 200; i < 1000; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(lo * std::pow(hi / lo, (i - 200 + 0.5) / 800.0));
  s.on_ffn_activation(0, v.data(), 1, 1000);
  for (double sp : {0.3, 0.6, 0.9}) {
    const double frac = (sp - 0.2) / 0.8;  // share of the bin's mass below the quantile
    const double want = lo * std::pow(hi / lo, frac);
    EXPECT_NEAR(std::log(s.thresholds_for_sparsity(sp)[0]), std::log(want),
                0.01 * std::log(hi / lo))
        << sp;
  }
  EXPECT_EQ(s.thresholds_for_sparsity(0.2)[0], 0.0f);
  // A share in (0, hist_min) is interpolated linearly from 0.
  ActStats u(1, 2, FfnActivation::kSilu);
  const float tiny[] = {0.0f, 5e-7f};
  u.on_ffn_activation(0, tiny, 1, 2);
  EXPECT_NEAR(u.thresholds_for_sparsity(0.75)[0], 0.5 * u.bin_upper(1), 1e-12);
}

TEST(ActStats, NeuronsCoveringOnAConstructedPowerLaw) {
  // 100 neurons, 100 tokens: 10 hot neurons fire on every token (1000 firings), 90 cold ones
  // once each (90): 1090 firings. Hot neurons sit at shuffled indices.
  const int64_t n_ff = 100, n_tok = 100;
  std::vector<int> order(n_ff);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::vector<float> act(static_cast<size_t>(n_tok * n_ff), 0.0f);  // [n_tok, n_ff]
  for (int k = 0; k < n_ff; ++k) {
    const int i = order[static_cast<size_t>(k)];
    for (int t = 0; t < n_tok; ++t)
      if (k < 10 || t == k) act[static_cast<size_t>(t * n_ff + i)] = 1.0f;
  }
  ActStats s(1, n_ff, FfnActivation::kRelu);
  s.on_ffn_activation(0, act.data(), n_tok, n_ff);
  EXPECT_DOUBLE_EQ(s.firing_share(0), 1090.0 / 10000.0);
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 0.5), 0.06);   // 545 firings: 6 hot neurons
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 0.8), 0.09);   // 872: 9 hot
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 0.9), 0.10);   // 981: all 10 hot
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 0.99), 0.90);  // 1079.1: 10 hot + 80 cold
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 1.0), 1.00);
  EXPECT_DOUBLE_EQ(s.neurons_covering(0, 0.0), 0.0);
  ActStats empty(1, n_ff, FfnActivation::kRelu);
  EXPECT_DOUBLE_EQ(empty.neurons_covering(0, 0.9), 0.0);
}

ActStats recorded_stats() {
  const int64_t n_tok = 50, n_ff = 64;
  ActStats s(3, n_ff, FfnActivation::kSilu);
  const std::vector<float> a = silu_like(n_tok, n_ff, 9);
  s.set_counting(false);
  for (int il = 0; il < 3; ++il) s.on_ffn_activation(il, a.data(), n_tok, n_ff);
  s.set_thresholds(s.thresholds_for_sparsity(0.6));
  s.set_sparsity_target(0.6f);
  s.set_counting(true);
  for (int il = 0; il < 3; ++il) s.on_ffn_activation(il, a.data() + il * n_ff, n_tok - il, n_ff);
  return s;
}

TEST(ActStats, WriteReadRoundTrip) {
  TempDir dir;
  const ActStats s = recorded_stats();
  ASSERT_TRUE(s.write(dir.file("s.gguf"), "tiny-model", "corpus.txt").ok());
  auto r = ActStats::read(dir.file("s.gguf"));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_layer(), 3);
  EXPECT_EQ(r->n_ff(), 64);
  EXPECT_EQ(r->activation(), FfnActivation::kSilu);
  EXPECT_EQ(r->n_tokens(), 50u);
  EXPECT_EQ(r->n_tokens_hist(), 100u);
  EXPECT_EQ(r->model_name(), "tiny-model");
  EXPECT_EQ(r->corpus(), "corpus.txt");
  EXPECT_FLOAT_EQ(r->sparsity_target(), 0.6f);
  EXPECT_EQ(r->thresholds(), s.thresholds());
  EXPECT_GT(r->threshold(0), 0.0f);
  for (int il = 0; il < 3; ++il) {
    EXPECT_EQ(r->fire_count(il), s.fire_count(il));
    EXPECT_EQ(r->act_abs_sum(il), s.act_abs_sum(il));
    EXPECT_EQ(r->act_hist(il), s.act_hist(il));
    EXPECT_EQ(r->neurons_covering(il, 0.8), s.neurons_covering(il, 0.8));
    EXPECT_EQ(r->firing_share(il), s.firing_share(il));
  }
  EXPECT_EQ(r->thresholds_for_sparsity(0.7), s.thresholds_for_sparsity(0.7));
  for (float a : {0.0f, 3e-7f, 1e-3f, 0.5f, 1.0f, 7.0f}) EXPECT_EQ(r->bin_of(a), s.bin_of(a));

  LlamaHParams hp;
  hp.n_layer = 3;
  hp.n_ff = 64;
  hp.ffn_act = FfnActivation::kSilu;
  EXPECT_TRUE(r->check_matches(hp).ok());
  hp.n_ff = 128;
  Status st = r->check_matches(hp);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("n_ff 64"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("n_ff 128"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tiny-model"), std::string::npos) << st.message();
  hp.n_ff = 64;
  hp.ffn_act = FfnActivation::kRelu;
  st = r->check_matches(hp);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("relu"), std::string::npos) << st.message();
}

TEST(ActStats, EveryActivationRoundTrips) {
  // dReLU (bamboo) and GELU (falcon) profiles are written with their names: read() took only
  // relu and silu before, refusing the files profile had just written for those models.
  TempDir dir;
  for (FfnActivation a : {FfnActivation::kRelu, FfnActivation::kDRelu, FfnActivation::kSilu,
                          FfnActivation::kGelu}) {
    ActStats s(2, 8, a);
    ASSERT_TRUE(s.write(dir.file("a.gguf"), "m", "c").ok());
    auto r = ActStats::read(dir.file("a.gguf"));
    ASSERT_TRUE(r.ok()) << activation_name(a) << ": " << r.message();
    EXPECT_EQ(r->activation(), a);
  }
}

// A copy of the stats file at `src` with `edit` applied to its metadata and tensors.
struct FileCopy {
  GgufWriter w;
  std::vector<std::vector<uint8_t>> data;  // owned tensor bytes
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

std::string error_reading(const std::string& path) {
  auto r = ActStats::read(path);
  return r.ok() ? "(read succeeded)" : r.message();
}

TEST(ActStats, ReadRejectsWrongAndCorruptFiles) {
  TempDir dir;
  const std::string good = dir.file("good.gguf");
  ASSERT_TRUE(recorded_stats().write(good, "m", "c").ok());
  const std::vector<uint8_t> bytes = read_bytes(good);
  auto parsed = parse_gguf(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.message();

  // Rewrites the good file through `edit`, returns the error reading the result.
  auto with_edit = [&](const std::string& name, auto edit) {
    GgufWriter w;
    w.kv = parsed->kv;
    std::vector<std::vector<uint8_t>> owned;
    owned.reserve(parsed->tensors.size() + 1);
    for (const GgufTensorInfo& t : parsed->tensors) {
      owned.emplace_back(t.data, t.data + t.nbytes);
      w.add_tensor({t.name, t.ne, t.type, owned.back()});
    }
    edit(w, owned);
    EXPECT_TRUE(w.write_file(dir.file(name)).ok());
    return error_reading(dir.file(name));
  };

  std::string e = with_edit("model.gguf", [](GgufWriter& w, auto&) {
    w.set("general.architecture", GgufValue::str("llama"));
  });
  EXPECT_NE(e.find("not a hotcold statistics file"), std::string::npos) << e;
  EXPECT_NE(e.find("'llama'"), std::string::npos) << e;
  EXPECT_NE(e.find("model.gguf"), std::string::npos) << e;

  e = with_edit("missing.gguf", [](GgufWriter& w, auto&) {
    std::erase_if(w.tensors, [](const GgufTensorToWrite& t) { return t.name == "blk.1.act_hist"; });
  });
  EXPECT_NE(e.find("missing tensor 'blk.1.act_hist'"), std::string::npos) << e;

  e = with_edit("shape.gguf", [](GgufWriter& w, auto&) {
    for (auto& t : w.tensors)
      if (t.name == "blk.2.fire_count") {
        t.ne = {32};
        t.data = t.data.subspan(0, 32 * 4);
      }
  });
  EXPECT_NE(e.find("'blk.2.fire_count': expected F32 [64], found F32 [32]"), std::string::npos)
      << e;

  e = with_edit("count.gguf", [](GgufWriter& w, auto& owned) {
    for (size_t k = 0; k < w.tensors.size(); ++k)
      if (w.tensors[k].name == "blk.0.fire_count") {
        const float big = 1e6f;
        std::memcpy(owned[k].data(), &big, 4);
      }
  });
  EXPECT_NE(e.find("blk.0.fire_count"), std::string::npos) << e;

  e = with_edit("version.gguf",
                [](GgufWriter& w, auto&) { w.set("hotcold.stats.version", GgufValue::u32(2)); });
  EXPECT_NE(e.find("version is 2"), std::string::npos) << e;

  e = with_edit("nokey.gguf", [](GgufWriter& w, auto&) {
    std::erase_if(w.kv, [](const auto& kv) { return kv.first == "hotcold.stats.n_ff"; });
  });
  EXPECT_NE(e.find("hotcold.stats.n_ff"), std::string::npos) << e;

  // Truncated, and not there at all.
  std::ofstream(dir.file("short.gguf"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size() / 2));
  e = error_reading(dir.file("short.gguf"));
  EXPECT_NE(e.find("short.gguf"), std::string::npos) << e;
  EXPECT_NE(error_reading(dir.file("absent.gguf")).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace hc
