// hc-planner-bench: how long the placement planners take, and what they predict, on synthetic
// 7B-shaped power-law layers (docs/PLANNER.md's timings): for each budget (a share of
// everything), plan_greedy and plan_ilp with the given round-trip model.
//
//   hc-planner-bench [--layers N] [--n-ff N] [--shares-trip 0|1] [--budgets 0.1,0.25,0.5]
//                    [--time-limit S] [--sync-us U] [--op-us U]
//
// Layers: LLaMA-2-7B's Q4_0 attention (4 x 4096^2) with a 512-position KV cache, neurons of
// gate + up (Q4_0) + down_t (Q8_0) rows, firing p_r = min(1, 0.95 / (1 + r)^0.7) by rank r,
// each layer's ranks rotated by 101 neurons; host 50 GB/s, device 3000 GB/s, link 25 GB/s.
// One line per budget: seconds taken by both solvers, the ILP's status, both predictions.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "app/args.h"
#include "sparse/planner.h"

namespace hc {
namespace {

constexpr char kTool[] = "hc-planner-bench";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int run(const std::vector<std::string>& argv) {
  int layers = 32, n_ff = 11008, shares = 1;
  float time_limit = 10, sync_us = 15, op_us = 3;
  std::string budgets = "0.1,0.25,0.5";
  ArgParser p(kTool, "planner timings on synthetic 7B-shaped power-law layers");
  p.add_int("--layers", &layers, "layers");
  p.add_int("--n-ff", &n_ff, "neurons per layer");
  p.add_int("--shares-trip", &shares, "1: attention and hot neurons share one round trip");
  p.add_string("--budgets", &budgets, "comma-separated shares of everything");
  p.add_float("--time-limit", &time_limit, "ILP time limit, seconds");
  p.add_float("--sync-us", &sync_us, "device round trip, microseconds");
  p.add_float("--op-us", &op_us, "one device command, microseconds");
  const Status st = p.parse(argv);
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (!st.ok() || layers < 1 || n_ff < 32) {
    std::fprintf(stderr, "%s: error: %s\n", kTool,
                 st.ok() ? "--layers >= 1 and --n-ff >= 32" : st.message().c_str());
    return 2;
  }
  sparse::PlanInput in;
  in.hw.host_gbps = 50;
  in.hw.dev_gbps = 3000;
  in.hw.link_gbps = 25;
  in.hw.op_us = op_us;
  in.hw.sync_us = sync_us;
  in.n_embd = 4096;
  uint64_t all = 0;
  for (int il = 0; il < layers; ++il) {
    sparse::LayerCosts l;
    l.fire_prob.resize(static_cast<size_t>(n_ff));
    for (int r = 0; r < n_ff; ++r)
      l.fire_prob[static_cast<size_t>((r + il * 101) % n_ff)] =
          std::min(1.0, 0.95 / std::pow(1.0 + r, 0.7));
    l.attn_bytes = 4ull * 4096 * 4096 * 9 / 16;
    l.kv_bytes = 2ull * 512 * 4096 * 2;
    l.kv_read_bytes = l.kv_bytes / 2;
    l.neuron_bytes = 2 * 4096 * 9 / 16 + 4096 * 34 / 32;
    l.host_neuron_bytes = 4096 * 9 / 16 + 4096 * 34 / 32;
    l.host_cold_bytes = 4096 * 9 / 16;
    l.shares_trip = shares != 0;
    all += l.attn_bytes + l.kv_bytes + l.neuron_bytes * static_cast<uint64_t>(n_ff);
    in.layers.push_back(std::move(l));
  }
  std::stringstream ss(budgets);
  for (std::string b; std::getline(ss, b, ',');) {
    sparse::PlannerOptions o;
    o.budget_bytes = static_cast<uint64_t>(std::stod(b) * static_cast<double>(all));
    o.granule = 32;
    o.ilp_time_limit_s = time_limit;
    o.log_progress = false;
    const double t0 = now_s();
    auto g = sparse::plan_greedy(in, o);
    const double t1 = now_s();
    auto i = sparse::plan_ilp(in, o);
    const double t2 = now_s();
    std::printf("budget %s of everything, shares_trip %d: greedy %.3f s %s, ilp %.2f s %s\n",
                b.c_str(), shares, t1 - t0,
                g.ok() ? (std::to_string(1e3 * g->prediction.seconds_per_token) + " ms").c_str()
                       : g.message().c_str(),
                t2 - t1,
                i.ok() ? (std::to_string(1e3 * i->prediction.seconds_per_token) + " ms (" +
                          i->ilp_status + ")").c_str()
                       : ("no plan: " + i.message()).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace hc

int main(int argc, char** argv) { return hc::run(std::vector<std::string>(argv + 1, argv + argc)); }
