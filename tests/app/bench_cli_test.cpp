// `hotcold bench`: the roofline figures (weight GB/s against a read bandwidth, given or
// measured), the RSS budget check and the `--membw` probe, on the real stories260K model
// converted from ../shared by the binary itself. Only plumbing and arithmetic are checked,
// never speed (that is bench/'s job).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "cli_util.h"

namespace hc::test {
namespace {

class BenchCli : public StoriesModelTest {};

// The text of the JSON object value of "key" (braces included), or "" when absent. The
// bench objects hold no braces inside strings except the model path, which tests choose.
std::string object_of(const std::string& json, const std::string& key) {
  const size_t k = json.find("\"" + key + "\": {");
  if (k == std::string::npos) return "";
  const size_t open = json.find('{', k);
  int depth = 0;
  for (size_t i = open; i < json.size(); ++i) {
    if (json[i] == '{') ++depth;
    if (json[i] == '}' && --depth == 0) return json.substr(open, i - open + 1);
  }
  return "";
}

// The number after "key": in json; NaN when the key is missing or not followed by a number.
double number(const std::string& json, const std::string& key) {
  const std::string pat = "\"" + key + "\": ";
  const size_t k = json.find(pat);
  if (k == std::string::npos) return std::nan("");
  const char* p = json.c_str() + k + pat.size();
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  return end == p ? std::nan("") : v;
}

TEST_F(BenchCli, JsonWithGivenBandwidthReportsRooflineAndRssBudget) {
  CliResult r = run_hotcold({"bench", "-m", model_, "-p", "16", "-n", "8", "-r", "2", "--json", "--membw-gbs", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& j = r.out;
  ASSERT_EQ(j.front(), '{') << j;
  ASSERT_EQ(j.substr(j.size() - 2), "}\n") << j;
  // Fields bench/compare_llamacpp.py and older scripts read are still there.
  for (const char* key : {"model", "file_mib", "threads", "reps", "peak_rss_mib"})
    EXPECT_TRUE(has(j, std::string("\"") + key + "\": ")) << key << " missing in " << j;
  const std::string pp = object_of(j, "pp"), tg = object_of(j, "tg"), bw = object_of(j, "membw");
  ASSERT_FALSE(pp.empty()) << j;
  ASSERT_FALSE(tg.empty()) << j;
  ASSERT_FALSE(bw.empty()) << j;
  EXPECT_GT(number(pp, "tps_mean"), 0.0);
  EXPECT_GE(number(pp, "tps_sd"), 0.0);
  EXPECT_EQ(number(pp, "n"), 16);
  EXPECT_EQ(number(tg, "n"), 8);

  // The given bandwidth is used as is; no probe ran.
  EXPECT_EQ(number(bw, "read_gbps"), 20.0) << bw;
  EXPECT_TRUE(has(bw, "\"source\": \"given\"")) << bw;
  EXPECT_FALSE(has(bw, "read_isa")) << bw;

  const double tps = number(tg, "tps_mean"), gb_tok = number(tg, "weight_gb_per_token");
  const double gbps = number(tg, "gbps"), share = number(tg, "roofline_share_pct");
  const double roofline = number(tg, "roofline_tps");
  ASSERT_GT(tps, 0.0) << tg;
  ASSERT_GT(gb_tok, 0.0) << tg;
  EXPECT_NEAR(gbps, gb_tok * tps, 1e-3 * gbps + 2e-3) << tg;
  EXPECT_NEAR(share, gbps / 20.0 * 100.0, 0.02) << tg;  // printed with 3 and 2 decimals
  EXPECT_NEAR(roofline, 20.0 / gb_tok, 1e-3 * roofline) << tg;

  const double rss = number(j, "peak_rss_mib"), file = number(j, "file_mib");
  const double kv = number(j, "kv_cache_mib"), budget = number(j, "rss_budget_mib");
  EXPECT_GT(rss, 0.0);
  EXPECT_GT(kv, 0.0);
  EXPECT_NEAR(budget, (file + kv) * 1.1, 0.06) << j;
  const bool within = has(j, "\"rss_within_budget\": true");
  EXPECT_TRUE(within || has(j, "\"rss_within_budget\": false")) << j;
  if (std::fabs(rss - budget) > 0.1) {
    EXPECT_EQ(within, rss <= budget) << j;
  }
}

TEST_F(BenchCli, MeasuredBandwidthByDefaultAndNoneWithNoMembw) {
  CliResult r = run_hotcold({"bench", "-m", model_, "-p", "0", "-n", "4", "-r", "1", "--json",
                             "--membw-mib", "128", "--membw-reps", "2", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bw = object_of(r.out, "membw"), tg = object_of(r.out, "tg");
  EXPECT_TRUE(has(bw, "\"source\": \"measured\"")) << bw;
  EXPECT_TRUE(has(bw, "\"read_isa\": ")) << bw;
  EXPECT_EQ(number(bw, "threads"), 1) << bw;
  EXPECT_EQ(number(bw, "array_mib"), 128.0) << bw;
  const double read = number(bw, "read_gbps");
  ASSERT_TRUE(std::isfinite(read) && read > 0) << bw;
  EXPECT_LE(number(bw, "read_gbps_median"), read + 1e-3) << bw;
  EXPECT_NEAR(number(tg, "roofline_share_pct"), number(tg, "gbps") / read * 100.0,
              0.01 + 0.1 / read * 100.0) << r.out;
  EXPECT_FALSE(has(r.out, "\"pp\"")) << r.out;  // -p 0 skips prompt processing
  // The probe's 128 MiB array must not count towards the model's peak RSS (a 1 MiB model): had
  // it counted, the peak would be at least the array. (Not a tighter bound: under ASan with CI's
  // 64 MiB quarantine the model's run alone peaks at 64 MiB.)
  EXPECT_LT(number(r.out, "peak_rss_mib"), number(bw, "array_mib")) << r.out;

  r = run_hotcold({"bench", "-m", model_, "-p", "8", "-n", "4", "-r", "1", "--json", "--no-membw"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.out, "\"membw\"")) << r.out;
  EXPECT_FALSE(has(r.out, "roofline")) << r.out;
  EXPECT_TRUE(has(r.out, "\"gbps\": ")) << r.out;
  EXPECT_TRUE(has(r.out, "\"rss_within_budget\": ")) << r.out;
}

TEST_F(BenchCli, TableShowsRooflineAndBudgetColumns) {
  CliResult r = run_hotcold({"bench", "-m", model_, "-p", "8", "-n", "4", "-r", "2", "--membw-gbs", "25"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "memory read bandwidth: 25.00 GB/s (given by --membw-gbs)")) << r.out;
  EXPECT_TRUE(has(r.out, "| % of read BW | roofline t/s |")) << r.out;
  EXPECT_TRUE(has(r.out, "| pp8 |")) << r.out;
  EXPECT_TRUE(has(r.out, "| tg4 |")) << r.out;
  EXPECT_TRUE(has(r.out, "| within budget |")) << r.out;
  EXPECT_TRUE(has(r.out, " | yes |\n") || has(r.out, " | no |\n")) << r.out;
}

TEST(BenchMembw, ProbeAloneNeedsNoModel) {
  CliResult r = run_hotcold({"bench", "--membw", "--json", "-t", "2", "--membw-mib", "8", "--membw-reps", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bw = object_of(r.out, "membw");
  ASSERT_FALSE(bw.empty()) << r.out;
  EXPECT_EQ(number(bw, "threads"), 2);
  EXPECT_EQ(number(bw, "reps"), 2);
  for (const char* k : {"read", "copy", "scale", "add", "triad"}) {
    const double v = number(bw, std::string(k) + "_gbps");
    const double median = number(bw, std::string(k) + "_gbps_median");
    EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " in " << bw;
    EXPECT_TRUE(median > 0 && median <= v + 1e-3) << k << " in " << bw;  // best >= median
  }
  r = run_hotcold({"bench", "--membw", "-t", "1", "--membw-mib", "8", "--membw-reps", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "| kernel | bytes/element | GB/s (best) | GB/s (median) |")) << r.out;
  EXPECT_TRUE(has(r.out, "| read | 4 | ")) << r.out;
  EXPECT_TRUE(has(r.out, "| triad | 12 | ")) << r.out;
}

TEST(BenchMembw, BadFlagsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"--membw-gbs", "-3"}, "expected --membw-gbs > 0 (0 = measure), got -3"},
      {{"--membw-gbs", "fast"}, "--membw-gbs"},
      {{"--membw", "--no-membw"}, "exclude each other"},
      {{"--membw", "--membw-gbs", "20"}, "exclude each other"},
      {{"--no-membw", "--membw-gbs", "20"}, "exclude each other"},
      {{"--membw", "--membw-mib", "0"}, "--membw-mib"},
      {{"--membw", "--membw-reps", "-1"}, "--membw-reps"},
      {{"--membw", "-t", "0"}, "-t >= 1"},
      {{"--membw", "--frobnicate"}, "unknown flag '--frobnicate'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"bench"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = run_hotcold(args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_TRUE(has(r.err, "hotcold bench: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, c.message)) << c.message << " not in " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  // Without --membw a model is still required (a runtime error, as before).
  CliResult r = run_hotcold({"bench", "-n", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "no model given")) << r.err;
}

}  // namespace
}  // namespace hc::test
