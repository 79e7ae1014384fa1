// The projection's modes on top of the planner's cost model (perfmodel/simulate.h;
// docs/SIMULATE.md has the equations and the sources).
#include "perfmodel/simulate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "perfmodel/detail.h"
#include "perfmodel/device_ops.h"

namespace hc::perfmodel {

using detail::kGB;
using detail::kUs;
using sparse::LayerCosts;
using sparse::LayerPlacement;
using sparse::empty_plan;
using sparse::neurons_by_frequency;
using sparse::LayerTime;
using sparse::PlacementPlan;
using sparse::PlanInput;
using sparse::PlannerOptions;
using sparse::PlanResult;
using sparse::Prediction;
using sparse::plan_best;
using sparse::plan_greedy;
using sparse::predict_plan;

namespace {

// Layer l's FFN on the host alone, its gate dense (the decode layout), in seconds. A firing
// share past the union limit runs up and down over every row (the executor's dense fallback).
double host_only_ffn_s(const SimInput& in, const SimOptions& opt, const PlanInput& pin, int l) {
  const LayerCosts& c = pin.layers[static_cast<size_t>(l)];
  const LayerBytes& b = in.model.layers[static_cast<size_t>(l)];
  double bytes = 0;
  const double share = mean_firing(c.fire_prob);
  if (c.host_cold_bytes > 0 && share > opt.max_union_share)
    bytes += static_cast<double>(in.model.n_ff) * static_cast<double>(b.up_row + b.down_t_row) /
             in.eff.sparse_at(1.0);
  else
    for (double p : c.fire_prob) bytes += p * static_cast<double>(c.host_neuron_bytes);
  bytes += static_cast<double>(c.host_fixed_bytes) +
           (c.predictor_on_device ? 0.0 : static_cast<double>(c.predictor_bytes));
  if (c.host_cold_bytes > 0)  // threshold mode: every gate row, at the dense rate
    bytes += static_cast<double>(in.model.n_ff) *
             static_cast<double>(in.model.layers[static_cast<size_t>(l)].gate_row);
  return bytes / (pin.hw.host_gbps * kGB);
}

// An MoE layer's router (host_fixed_bytes) must run before the device can start its experts, but
// the planner counts it in the host half, which overlaps the device's: the time that adds when
// the layer uses an overlapping device.
double moe_router_s(const PlanInput& pin, const LayerCosts& c, const LayerTime& lt,
                    bool overlapped) {
  if (!overlapped) return 0.0;
  const double router_s = static_cast<double>(c.host_fixed_bytes) / (pin.hw.host_gbps * kGB);
  return router_s + std::max(lt.ffn_device_s, lt.ffn_host_s - router_s) -
         std::max(lt.ffn_device_s, lt.ffn_host_s);
}

// A layer whose FFN is split between the devices: some of its units on the device, the rest on
// the host (a layer holding every one has no host half).
bool split_layer(const LayerPlacement& lp, const LayerCosts& c) {
  return !lp.hot.empty() && lp.hot.size() < c.fire_prob.size();
}

// A plan evaluated on `pin` with the terms the planner's model lacks (see simulate.h).
Result<ModeResult> evaluate(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                            const PlacementPlan& plan, bool output_dev, const char* mode) {
  HC_ASSIGN_OR_RETURN(Prediction pr, predict_plan(pin, plan));
  const ModelBytes& m = in.model;
  ModeResult r;
  r.mode = mode;
  double s = pr.seconds_per_token, mass_dev = 0, mass_all = 0;
  bool any = pr.device_bytes > 0;
  for (int l = 0; l < m.n_layer(); ++l) {
    const LayerPlacement& lp = plan.layers[static_cast<size_t>(l)];
    const LayerCosts& c = pin.layers[static_cast<size_t>(l)];
    const double mass = std::accumulate(c.fire_prob.begin(), c.fire_prob.end(), 0.0);
    mass_all += mass;
    mass_dev += pr.layers[static_cast<size_t>(l)].device_mass * mass;
    r.hot_neurons += static_cast<int64_t>(lp.hot.size());
    r.attn_on_device += lp.attn_on_device ? 1 : 0;
    r.layers_on_device += (!lp.hot.empty() || lp.attn_on_device) ? 1 : 0;
    const LayerTime& lt = pr.layers[static_cast<size_t>(l)];
    if (!in.hw.overlap && (!lp.hot.empty() || c.predictor_on_device))
      s += std::min(lt.ffn_device_s, lt.ffn_host_s);  // sum of the halves, not their max
    if (split_layer(lp, c)) s += in.hw.hybrid_layer_us * kUs;
    s += ((lp.attn_on_device ? kPacedAttnOps : 0) +
          (!lp.hot.empty() || c.predictor_on_device ? kPacedFfnOps : 0)) *
         in.hw.paced_op_us * kUs;
    if (m.moe()) {
      s += moe_router_s(pin, c, lt, !lp.hot.empty() && in.hw.overlap);
    } else if (lp.hot.empty() && !opt.predictor && !c.predictor_on_device) {
      // A layer without device neurons runs its gate dense (the decode layout) instead of
      // reading the cold gate rows in order, and past the union limit its up and down over
      // every row.
      s += host_only_ffn_s(in, opt, pin, l) - lt.ffn_host_s;
    }
  }
  r.device_bytes = pr.device_bytes;
  if (output_dev) {
    s += -pin.other_s + static_cast<double>(m.output) / (in.hw.dev_gbps() * kGB) +
         kOutputOps * in.hw.op_us * kUs + kPacedOutputOps * in.hw.paced_op_us * kUs +
         in.hw.sync_us * kUs +
         static_cast<double>(m.n_embd + m.n_vocab) * 4 / (in.hw.link_gbps * kGB);
    r.device_bytes = (any ? r.device_bytes : in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes) +
                     m.output;
    r.output_on_device = true;
  }
  r.s_per_token = s;
  r.tok_s = s > 0 ? 1.0 / s : 0.0;
  r.device_mass = mass_all > 0 ? mass_dev / mass_all : 0.0;
  return r;
}

Result<PlanResult> make_plan(const PlanInput& pin, uint64_t budget, const SimOptions& opt) {
  PlannerOptions po;
  po.budget_bytes = budget;
  po.granule = opt.granule;
  po.ilp_time_limit_s = opt.ilp_time_limit_s;
  po.log_progress = false;
  if (opt.use_ilp) return plan_best(pin, po);
  return plan_greedy(pin, po);
}

// The planner's plan for `pin` within the budget. The planner charges every cold gate row at
// the rate of the row kernels the hybrid layer uses, but a layer with no device neurons runs its
// gate dense: layers whose hybrid FFN comes out slower than that are taken out (their statistics
// zeroed for the planner, which then spends the bytes elsewhere) until none is left.
Result<PlanResult> plan_pruned(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                               uint64_t budget) {
  PlanInput work = pin;
  PlanResult r;
  for (int iter = 0; iter < 8; ++iter) {
    HC_ASSIGN_OR_RETURN(r, make_plan(work, budget, opt));
    HC_ASSIGN_OR_RETURN(Prediction pr, predict_plan(pin, r.plan));
    bool pruned = false;
    for (int l = 0; l < pin.n_layer(); ++l) {
      LayerPlacement& lp = r.plan.layers[static_cast<size_t>(l)];
      if (lp.hot.empty() || pin.layers[static_cast<size_t>(l)].host_cold_bytes == 0) continue;
      const LayerTime& lt = pr.layers[static_cast<size_t>(l)];
      const double hybrid_s =
          lt.ffn_s +
          (split_layer(lp, pin.layers[static_cast<size_t>(l)]) ? in.hw.hybrid_layer_us * kUs
                                                               : 0.0) +
          (in.hw.overlap ? 0.0 : std::min(lt.ffn_device_s, lt.ffn_host_s));
      if (host_only_ffn_s(in, opt, pin, l) <= hybrid_s) {
        lp.hot.clear();
        std::fill(work.layers[static_cast<size_t>(l)].fire_prob.begin(),
                  work.layers[static_cast<size_t>(l)].fire_prob.end(), 0.0);
        pruned = true;
      }
    }
    if (!pruned) break;
  }
  return r;
}

// The plan's per-layer capacities refilled with the top-k of p (attention kept).
PlacementPlan refill(const PlacementPlan& plan, const std::vector<std::vector<double>>& p) {
  PlacementPlan out = plan;
  for (size_t l = 0; l < out.layers.size(); ++l) {
    std::vector<int32_t>& hot = out.layers[l].hot;
    const size_t k = hot.size();
    if (k == 0) continue;
    const std::vector<int32_t> order = neurons_by_frequency(p[l]);
    hot.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(hot.begin(), hot.end());
  }
  return out;
}

// Bytes newly placed on the device going from plan a to plan b (units: neurons, or whole
// experts, at what one takes on the device).
double moved_bytes(const SimInput& in, const SimOptions& opt, const PlanInput& pin,
                   const PlacementPlan& a, const PlacementPlan& b) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  double bytes = 0;
  for (size_t l = 0; l < b.layers.size(); ++l) {
    const LayerCosts& c = pin.layers[l];
    std::vector<char> was(static_cast<size_t>(m.n_units()), 0);
    for (int32_t i : a.layers[l].hot) was[static_cast<size_t>(i)] = 1;
    int64_t added = 0;
    for (int32_t i : b.layers[l].hot) added += was[static_cast<size_t>(i)] ? 0 : 1;
    const uint64_t unit = c.hot_store_bytes ? c.hot_store_bytes(1) : c.neuron_bytes;
    bytes += static_cast<double>(added) * static_cast<double>(unit);
    if (b.layers[l].attn_on_device && !a.layers[l].attn_on_device)
      bytes += static_cast<double>(m.layers[l].attn + kv);
  }
  return bytes;
}

// The planner's input for either kind of model.
Result<PlanInput> plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                             const SimOptions& opt) {
  return in.model.moe() ? moe_plan_input(in, p, opt) : hybrid_plan_input(in, p, opt);
}

ModeResult dense_cpu_mode(const SimInput& in, const SimOptions& opt) {
  ModeResult dense;
  dense.mode = "dense-cpu";
  dense.s_per_token = dense_seconds(in, opt, 0, false, &dense.device_bytes);
  dense.tok_s = 1.0 / dense.s_per_token;
  return dense;
}

ModeResult dense_offload_mode(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  ModeResult off;
  off.mode = "dense-offload";
  int n_dev = 0;
  bool out_dev = false;
  if (opt.n_gpu_layers >= 0) {
    n_dev = std::min(opt.n_gpu_layers, m.n_layer());
    out_dev = opt.n_gpu_layers > m.n_layer();
  } else {
    dense_layers_that_fit(in, opt, &n_dev, &out_dev);
  }
  off.s_per_token = dense_seconds(in, opt, n_dev, out_dev, &off.device_bytes);
  off.tok_s = 1.0 / off.s_per_token;
  off.layers_on_device = n_dev;
  off.attn_on_device = n_dev;
  off.output_on_device = out_dev;
  off.device_mass = static_cast<double>(n_dev) / m.n_layer();
  off.hot_neurons = static_cast<int64_t>(n_dev) * m.n_units();
  return off;
}

// llama.cpp's -ngl 99 --n-cpu-moe N (layers_on_device: layers with their experts on the device;
// device_mass: the share of layers whose experts the device computes).
ModeResult cpu_moe_mode(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  const CpuMoeSplit sp = cpu_moe_split_that_fits(in, opt);
  ModeResult r;
  r.mode = "llamacpp-cpu-moe";
  r.s_per_token = cpu_moe_seconds(in, opt, sp, &r.device_bytes);
  r.tok_s = 1.0 / r.s_per_token;
  r.attn_on_device = sp.n_gpu_layers;
  r.layers_on_device = std::max(0, std::min(sp.n_gpu_layers, m.n_layer() - sp.n_cpu_moe));
  r.output_on_device = sp.output;
  r.n_cpu_moe = sp.n_cpu_moe;
  r.device_mass = static_cast<double>(r.layers_on_device) / m.n_layer();
  r.hot_neurons = static_cast<int64_t>(r.layers_on_device) * m.n_expert;
  return r;
}

// The static plan (planned on the profile, or given) and where it put the output.
struct StaticPlan {
  PlacementPlan plan;
  bool output = false;
  uint64_t budget = 0;  // what the plan was made for (the budget less the output's)
  ModeResult mode;      // evaluated on the serving distribution
};

Result<StaticPlan> static_mode(const SimInput& in, const SimOptions& opt, const PlanInput& serve_in,
                               const char* name) {
  const ModelBytes& m = in.model;
  StaticPlan sp;
  sp.budget = opt.budget_bytes;
  if (opt.plan) {
    HC_TRY(opt.plan->check_matches(m.n_layer(), m.n_units()).with_context("plan"));
    sp.plan = *opt.plan;
    HC_ASSIGN_OR_RETURN(sp.mode, evaluate(in, opt, serve_in, sp.plan, false, name));
    sp.mode.solver = "file";
    return sp;
  }
  HC_ASSIGN_OR_RETURN(PlanInput prof_in, plan_input(in, in.profile, opt));
  // Output on the host, and (when it fits) on the device with the rest of the budget: the
  // faster on the profile is what an offline planner would pick.
  double best_prof = std::numeric_limits<double>::infinity();
  const uint64_t base = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  std::string solver;
  for (bool o : {false, true}) {
    if (o && (!opt.output_on_device || opt.budget_bytes < base + m.output)) continue;
    const uint64_t budget = o ? opt.budget_bytes - m.output : opt.budget_bytes;
    HC_ASSIGN_OR_RETURN(PlanResult pr, plan_pruned(in, opt, prof_in, budget));
    HC_ASSIGN_OR_RETURN(ModeResult on_prof, evaluate(in, opt, prof_in, pr.plan, o, name));
    if (on_prof.s_per_token < best_prof) {
      best_prof = on_prof.s_per_token;
      sp.plan = pr.plan;
      sp.output = o;
      sp.budget = budget;
      solver = pr.solver;
    }
  }
  HC_ASSIGN_OR_RETURN(sp.mode, evaluate(in, opt, serve_in, sp.plan, sp.output, name));
  sp.mode.solver = solver;
  return sp;
}

// Planned on the serving distribution, or the static capacities refilled with the serving top-k
// when that is faster (so never slower than static before migration); plus the newly placed
// bytes over the link, amortised over the drift period.
Result<ModeResult> dynamic_mode(const SimInput& in, const SimOptions& opt,
                                const PlanInput& serve_in,
                                const std::vector<std::vector<double>>& serve,
                                const StaticPlan& st) {
  const PlacementPlan refilled = refill(st.plan, serve);
  HC_ASSIGN_OR_RETURN(PlanResult dp, plan_pruned(in, opt, serve_in, st.budget));
  HC_ASSIGN_OR_RETURN(ModeResult dy, evaluate(in, opt, serve_in, dp.plan, st.output, "dynamic"));
  dy.solver = dp.solver;
  const PlacementPlan* dyn_plan = &dp.plan;
  HC_ASSIGN_OR_RETURN(ModeResult dr, evaluate(in, opt, serve_in, refilled, st.output, "dynamic"));
  if (dr.s_per_token < dy.s_per_token) {
    dy = dr;
    dy.solver = "refill";
    dyn_plan = &refilled;
  }
  dy.migration_bytes_per_token =
      moved_bytes(in, opt, serve_in, st.plan, *dyn_plan) / opt.drift_period_tokens;
  dy.migration_s = dy.migration_bytes_per_token / (in.hw.link_gbps * kGB);
  dy.s_per_token += dy.migration_s;
  dy.tok_s = 1.0 / dy.s_per_token;
  return dy;
}

}  // namespace

Result<SimResult> simulate(const SimInput& in, const SimOptions& opt_in) {
  HC_TRY(validate_input(in));
  HC_TRY(validate_options(opt_in));
  const ModelBytes& m = in.model;
  SimOptions opt = opt_in;
  if (m.moe()) opt.granule = 1;  // an expert is one placement unit
  SimResult res;
  const std::vector<std::vector<double>> serve =
      drift_firing(in.profile, opt.drift, opt.drift_seed);
  for (const auto& p : in.profile) {
    res.firing_share += mean_firing(p) / m.n_layer();
    res.cover80 += neurons_covering(p, 0.8) / m.n_layer();
  }
  res.top20_overlap = top_overlap(in.profile, serve, 0.2);

  res.modes.push_back(dense_cpu_mode(in, opt));
  HC_ASSIGN_OR_RETURN(PlanInput serve_in, plan_input(in, serve, opt));
  if (!m.moe() || in.expert_firing < 1) {  // dense experts: the same as dense-cpu
    HC_ASSIGN_OR_RETURN(
        ModeResult sparse_cpu,
        evaluate(in, opt, serve_in, empty_plan(m.n_layer(), m.n_units()), false, "sparse-cpu"));
    res.modes.push_back(sparse_cpu);
  }
  if (!in.hw.has_device) return res;
  res.modes.push_back(dense_offload_mode(in, opt));
  if (m.moe()) res.modes.push_back(cpu_moe_mode(in, opt));
  HC_ASSIGN_OR_RETURN(StaticPlan st,
                      static_mode(in, opt, serve_in, m.moe() ? "hot-experts" : "static"));
  res.modes.push_back(st.mode);
  HC_ASSIGN_OR_RETURN(ModeResult dy, dynamic_mode(in, opt, serve_in, serve, st));
  res.modes.push_back(dy);
  return res;
}

}  // namespace hc::perfmodel
