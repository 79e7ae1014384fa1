// The cost model (predict_plan), its per-layer prefix form shared with the ILP, the greedy
// planner and plan_best / plan_sweep. The model is documented in planner.h.
#include "sparse/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <queue>

#include "core/log.h"
#include "sparse/planner_internal.h"

namespace hc::sparse {

namespace {

constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;

bool finite_nonneg(double v) { return std::isfinite(v) && v >= 0; }
bool finite_pos(double v) { return std::isfinite(v) && v > 0; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status validate_hw(const HardwareProfile& hw) {
  if (!finite_pos(hw.host_gbps) || !finite_pos(hw.dev_gbps) || !finite_pos(hw.link_gbps))
    return Status::Error("hardware profile: bandwidths must be positive, found host " +
                         std::to_string(hw.host_gbps) + ", device " + std::to_string(hw.dev_gbps) +
                         ", link " + std::to_string(hw.link_gbps) + " GB/s");
  if (!finite_nonneg(hw.op_us) || !finite_nonneg(hw.sync_us))
    return Status::Error("hardware profile: op_us and sync_us must be >= 0, found " +
                         std::to_string(hw.op_us) + " and " + std::to_string(hw.sync_us));
  return Status::Ok();
}

uint64_t hot_store(const LayerCosts& l, int64_t n) {
  return l.hot_store_bytes ? l.hot_store_bytes(n) : static_cast<uint64_t>(n) * l.neuron_bytes;
}
uint64_t attn_store(const LayerCosts& l) {
  return l.attn_store_bytes ? l.attn_store_bytes : l.attn_bytes;
}

Status validate_layer(const LayerCosts& l, int il, size_t n_ff) {
  const std::string where = "layer " + std::to_string(il) + ": ";
  if (l.fire_prob.size() != n_ff)
    return Status::Error(where + "fire_prob has " + std::to_string(l.fire_prob.size()) +
                         " neurons, layer 0 has " + std::to_string(n_ff));
  if (l.neuron_bytes == 0) return Status::Error(where + "neuron_bytes is 0");
  if (l.hot_store_bytes) {  // checked where the planners evaluate it: 0, 1 and every neuron
    const auto n = static_cast<int64_t>(n_ff);
    const uint64_t b0 = l.hot_store_bytes(0), b1 = l.hot_store_bytes(1),
                   bn = l.hot_store_bytes(n);
    if (b0 != 0 || b1 == 0 || bn < b1)
      return Status::Error(where + "hot_store_bytes(0, 1, " + std::to_string(n) + ") = " +
                           std::to_string(b0) + ", " + std::to_string(b1) + ", " +
                           std::to_string(bn) + ": expected 0 and then positive, non-decreasing");
  }
  for (size_t i = 0; i < n_ff; ++i)
    if (!(l.fire_prob[i] >= 0 && l.fire_prob[i] <= 1))
      return Status::Error(where + "fire_prob[" + std::to_string(i) + "] is " +
                           std::to_string(l.fire_prob[i]) + ", expected a probability in [0, 1]");
  return Status::Ok();
}

double attn_host_s(const PlanInput& in, const LayerCosts& l) {
  return static_cast<double>(l.attn_bytes + l.kv_read_bytes) / (in.hw.host_gbps * kGB);
}

double trip_s(const PlanInput& in) {
  return in.hw.sync_us * kUs + 2.0 * static_cast<double>(in.n_embd) * 4 / (in.hw.link_gbps * kGB);
}

double attn_dev_s(const PlanInput& in, const LayerCosts& l) {
  return static_cast<double>(l.attn_bytes + l.kv_read_bytes) / (in.hw.dev_gbps * kGB) +
         in.attn_device_ops * in.hw.op_us * kUs + trip_s(in);
}

// The predictor's host bytes per token with the attention on the device or not.
double pred_host_bytes(const LayerCosts& l, bool attn_on_device) {
  const bool on_dev = l.predictor_on_device || (l.predictor_follows_attn && attn_on_device);
  return on_dev ? 0.0 : static_cast<double>(l.predictor_bytes);
}

// What a predictor that follows the attention adds to the attention's device time.
double pred_follow_dev_s(const PlanInput& in, const LayerCosts& l) {
  if (!l.predictor_follows_attn || l.predictor_on_device) return 0.0;
  return static_cast<double>(l.predictor_bytes) / (in.hw.dev_gbps * kGB) +
         in.predictor_device_ops * in.hw.op_us * kUs;
}

uint64_t pred_follow_bytes(const LayerCosts& l) {
  if (!l.predictor_follows_attn || l.predictor_on_device) return 0;
  return l.predictor_store_bytes ? l.predictor_store_bytes : l.predictor_bytes;
}

// One layer of predict_plan, straight from the definition (no prefix sums).
LayerTime predict_layer(const PlanInput& in, const LayerCosts& l, const LayerPlacement& lp) {
  LayerTime t;
  t.attn_s = lp.attn_on_device ? attn_dev_s(in, l) + pred_follow_dev_s(in, l)
                               : attn_host_s(in, l);
  std::vector<char> on_dev(l.fire_prob.size(), 0);
  for (int32_t i : lp.hot) on_dev[static_cast<size_t>(i)] = 1;
  double dev_read = 0, host_read = 0, mass_dev = 0, mass_all = 0;
  for (size_t i = 0; i < l.fire_prob.size(); ++i) {
    const double p = l.fire_prob[i];
    mass_all += p;
    if (on_dev[i]) {
      mass_dev += p;
      dev_read += in.device_reads_all_hot ? 1.0 : p;
    } else {
      host_read += p * static_cast<double>(l.host_neuron_bytes) +
                   static_cast<double>(l.host_cold_bytes);
    }
  }
  const bool uses = !lp.hot.empty() || l.predictor_on_device;
  t.ffn_device_s = dev_read * static_cast<double>(l.neuron_bytes) / (in.hw.dev_gbps * kGB);
  if (l.predictor_on_device)
    t.ffn_device_s += static_cast<double>(l.predictor_bytes) / (in.hw.dev_gbps * kGB);
  if (uses) t.ffn_device_s += in.ffn_device_ops * in.hw.op_us * kUs;
  host_read += static_cast<double>(l.host_fixed_bytes) + pred_host_bytes(l, lp.attn_on_device);
  t.ffn_host_s = host_read / (in.hw.host_gbps * kGB);
  // With attention on the device too and a shared trip, the attention's trip is this one.
  const bool shared = lp.attn_on_device && l.shares_trip;
  t.ffn_s = uses ? std::max(t.ffn_device_s, t.ffn_host_s) + (shared ? 0.0 : trip_s(in))
                 : t.ffn_host_s;
  t.device_mass = mass_all > 0 ? mass_dev / mass_all : 0.0;
  t.device_bytes = hot_store(l, static_cast<int64_t>(lp.hot.size())) +
                   (lp.attn_on_device ? attn_store(l) + l.kv_bytes + pred_follow_bytes(l) : 0) +
                   (l.predictor_on_device ? l.predictor_bytes : 0);
  return t;
}

}  // namespace

Status PlanInput::validate() const {
  HC_TRY(validate_hw(hw));
  if (n_embd < 1) return Status::Error("n_embd is " + std::to_string(n_embd) + ", expected >= 1");
  if (layers.empty()) return Status::Error("no layers to plan");
  if (layers[0].fire_prob.empty()) return Status::Error("layer 0: n_ff is 0");
  for (int il = 0; il < n_layer(); ++il)
    HC_TRY(validate_layer(layers[static_cast<size_t>(il)], il, layers[0].fire_prob.size()));
  if (!finite_nonneg(other_s)) return Status::Error("other_s is " + std::to_string(other_s));
  if (attn_device_ops < 0 || ffn_device_ops < 0 || predictor_device_ops < 0)
    return Status::Error("device op counts must be >= 0");
  return Status::Ok();
}

Result<std::vector<double>> fire_probabilities(const std::vector<float>& fire_count,
                                               uint64_t n_tokens) {
  if (n_tokens == 0) return Status::Error("statistics over 0 tokens: no firing frequencies");
  std::vector<double> p(fire_count.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double c = fire_count[i];
    if (!(c >= 0 && c <= static_cast<double>(n_tokens)))
      return Status::Error("fire_count[" + std::to_string(i) + "] is " + std::to_string(c) +
                           ", expected a count in [0, " + std::to_string(n_tokens) + "]");
    p[i] = c / static_cast<double>(n_tokens);
  }
  return p;
}

std::vector<int32_t> neurons_by_frequency(const std::vector<double>& p) {
  std::vector<int32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  return order;
}

Result<Prediction> predict_plan(const PlanInput& in, const PlacementPlan& plan) {
  HC_TRY(in.validate());
  HC_TRY(plan.validate());
  HC_TRY(plan.check_matches(in.n_layer(), in.n_ff()));
  Prediction pr;
  pr.seconds_per_token = in.other_s;
  uint64_t bytes = 0;
  bool any = false, any_attn = false;
  for (int il = 0; il < in.n_layer(); ++il) {
    const auto l = static_cast<size_t>(il);
    const LayerTime t = predict_layer(in, in.layers[l], plan.layers[l]);
    pr.seconds_per_token += t.total_s();
    bytes += t.device_bytes;
    any = any || t.device_bytes > 0 || !plan.layers[l].hot.empty() ||
          plan.layers[l].attn_on_device || in.layers[l].predictor_on_device;
    any_attn = any_attn || plan.layers[l].attn_on_device;
    pr.layers.push_back(t);
  }
  const uint64_t fixed =
      in.hw.dev_fixed_bytes - (any_attn ? 0 : std::min(in.hw.dev_attn_fixed_bytes,
                                                       in.hw.dev_fixed_bytes));
  pr.device_bytes = any ? bytes + in.hw.dev_overhead_bytes + fixed : 0;
  pr.tok_s = pr.seconds_per_token > 0 ? 1.0 / pr.seconds_per_token : 0.0;
  return pr;
}

Result<double> predict_seconds_per_token(const PlanInput& in, const PlacementPlan& plan) {
  HC_ASSIGN_OR_RETURN(Prediction pr, predict_plan(in, plan));
  return pr.seconds_per_token;
}

// --- shared by the planners -----------------------------------------------------------------

namespace detail {

namespace {

LayerModel build_model(const PlanInput& in, const LayerCosts& l, int granule) {
  LayerModel m;
  m.order = neurons_by_frequency(l.fire_prob);
  const double host_bw = in.hw.host_gbps * kGB, dev_bw = in.hw.dev_gbps * kGB;
  const auto n_ff = static_cast<int64_t>(l.fire_prob.size());
  const auto n_gran = static_cast<size_t>((n_ff + granule - 1) / granule);
  m.n_hot.assign(n_gran + 1, 0);
  m.dev_s.assign(n_gran + 1, 0.0);
  m.host_saved_s.assign(n_gran + 1, 0.0);
  m.mass.assign(n_gran + 1, 0.0);
  double dev = 0, saved = 0, mass = 0, host_all = 0;
  for (int64_t j = 0; j < n_ff; ++j) {
    const double p = l.fire_prob[static_cast<size_t>(m.order[static_cast<size_t>(j)])];
    const double host_b = p * static_cast<double>(l.host_neuron_bytes) +
                          static_cast<double>(l.host_cold_bytes);
    host_all += host_b;
    saved += host_b;
    dev += (in.device_reads_all_hot ? 1.0 : p) * static_cast<double>(l.neuron_bytes);
    mass += p;
    if ((j + 1) % granule == 0 || j + 1 == n_ff) {
      const size_t g = static_cast<size_t>(j / granule) + 1;
      m.n_hot[g] = j + 1;
      m.dev_s[g] = dev / dev_bw;
      m.host_saved_s[g] = saved / host_bw;
      m.mass[g] = mass;
    }
  }
  m.host_all_s =
      (host_all + static_cast<double>(l.host_fixed_bytes) + pred_host_bytes(l, false)) / host_bw;
  m.pred_host_s = (pred_host_bytes(l, false) - pred_host_bytes(l, true)) / host_bw;
  m.pred_on_device = l.predictor_on_device;
  m.dev_const_s = l.predictor_on_device ? static_cast<double>(l.predictor_bytes) / dev_bw : 0.0;
  m.ops_s = in.ffn_device_ops * in.hw.op_us * kUs;
  m.trip_s = trip_s(in);
  m.shared_trip_s = l.shares_trip ? m.trip_s : 0.0;
  m.ffn_store.resize(n_gran + 1);
  for (size_t g = 0; g <= n_gran; ++g) m.ffn_store[g] = hot_store(l, m.n_hot[g]);
  m.attn_host_s = attn_host_s(in, l);
  // Attention the device cannot run (falcon's) saves nothing there: never placed.
  m.attn_saved_s =
      l.attn_placeable ? m.attn_host_s - attn_dev_s(in, l) - pred_follow_dev_s(in, l) : 0.0;
  m.attn_placeable = l.attn_placeable;
  m.attn_bytes = attn_store(l) + l.kv_bytes + pred_follow_bytes(l);
  return m;
}

}  // namespace

std::vector<LayerModel> build_models(const PlanInput& in, int granule) {
  std::vector<LayerModel> models;
  models.reserve(in.layers.size());
  for (const LayerCosts& l : in.layers) models.push_back(build_model(in, l, granule));
  return models;
}

uint64_t base_bytes(const PlanInput& in) {
  uint64_t b = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  for (const LayerCosts& l : in.layers)
    if (l.predictor_on_device) b += l.predictor_bytes;
  return b;
}

bool predictors_on_device(const PlanInput& in) {
  for (const LayerCosts& l : in.layers)
    if (l.predictor_on_device) return true;
  return false;
}

PlacementPlan plan_from_decisions(const PlanInput& in, const std::vector<LayerModel>& models,
                                  const std::vector<int>& gran, const std::vector<bool>& attn) {
  PlacementPlan p = empty_plan(in.n_layer(), in.n_ff());
  for (size_t l = 0; l < models.size(); ++l) {
    const LayerModel& m = models[l];
    const int64_t k = m.n_hot[static_cast<size_t>(gran[l])];
    std::vector<int32_t>& hot = p.layers[l].hot;
    hot.assign(m.order.begin(), m.order.begin() + k);
    std::sort(hot.begin(), hot.end());
    p.layers[l].attn_on_device = attn[l];
  }
  return p;
}

uint64_t decision_bytes(const std::vector<LayerModel>& models, const std::vector<int>& gran,
                        const std::vector<bool>& attn) {
  uint64_t b = 0;
  for (size_t l = 0; l < models.size(); ++l)
    b += models[l].ffn_bytes(gran[l]) + (attn[l] ? models[l].attn_bytes : 0);
  return b;
}

Result<PlanResult> finish(const PlanInput& in, const PlannerOptions& opt, PlacementPlan plan,
                          const char* solver) {
  PlanResult r;
  HC_ASSIGN_OR_RETURN(r.prediction, predict_plan(in, plan));
  r.plan = std::move(plan);
  r.plan.solver = solver;
  r.plan.budget_bytes = opt.budget_bytes;
  r.plan.predicted_tok_s = static_cast<float>(r.prediction.tok_s);
  r.solver = solver;
  return r;
}

Result<int64_t> available_bytes(const PlanInput& in, const PlannerOptions& opt) {
  HC_TRY(in.validate());
  if (opt.granule < 1)
    return Status::Error("granule must be >= 1 neuron, found " + std::to_string(opt.granule));
  if (!(opt.ilp_time_limit_s > 0) || !std::isfinite(opt.ilp_time_limit_s))
    return Status::Error("ILP time limit must be a positive number of seconds, found " +
                         std::to_string(opt.ilp_time_limit_s));
  if (!(opt.ilp_mip_gap >= 0 && opt.ilp_mip_gap < 1))
    return Status::Error("ILP relative gap must be in [0, 1), found " +
                         std::to_string(opt.ilp_mip_gap));
  const uint64_t base = base_bytes(in);
  if (opt.budget_bytes >= base) return static_cast<int64_t>(opt.budget_bytes - base);
  if (predictors_on_device(in))
    return Status::Error("device budget of " + std::to_string(opt.budget_bytes) +
                         " bytes cannot hold the device's overhead, scratch and predictors (" +
                         std::to_string(base) + " bytes)");
  return int64_t{-1};
}

}  // namespace detail

// --- greedy ---------------------------------------------------------------------------------

namespace {

using detail::LayerModel;

// One candidate move: attention of layer il onto the device, or its FFN from its current
// number of hot granules to `to`.
struct Item {
  double ratio = 0;  // seconds saved per byte
  double saved_s = 0;
  uint64_t bytes = 0;
  int il = 0;
  bool attn = false;
  int to = 0;
};

// Max-heap order: best ratio first; ties broken by layer and kind, so the result is
// deterministic.
struct ItemLess {
  bool operator()(const Item& a, const Item& b) const {
    if (a.ratio != b.ratio) return a.ratio < b.ratio;
    if (a.il != b.il) return a.il > b.il;
    return a.attn < b.attn;
  }
};

double ratio_of(double saved_s, uint64_t bytes) {
  return saved_s / static_cast<double>(std::max<uint64_t>(bytes, 1));
}

// The layer's next FFN move from g hot granules within `room` bytes: one granule, or from
// g = 0 the span with the best ratio (the round trip makes small first spans look useless).
// attn: the layer's attention is on the device (a shared trip is then already paid).
bool next_ffn_item(const LayerModel& m, int il, int g, bool attn, int64_t room, Item* out) {
  const int last = g == 0 ? m.n_gran() : std::min(g + 1, m.n_gran());
  bool found = false;
  const double base_s = m.layer_s(g, attn);
  for (int to = g + 1; to <= last; ++to) {
    const uint64_t bytes = m.ffn_bytes(to) - m.ffn_bytes(g);
    if (static_cast<int64_t>(bytes) > room) break;
    const double saved = base_s - m.layer_s(to, attn);
    if (!(saved > 0)) continue;
    const double r = ratio_of(saved, bytes);
    if (!found || r > out->ratio) *out = Item{r, saved, bytes, il, false, to};
    found = true;
  }
  return found;
}

// g: the layer's hot granules (a shared trip makes attention worth more once they are there).
bool attn_item(const LayerModel& m, int il, int g, int64_t room, Item* out) {
  const double saved = m.layer_s(g, false) - m.layer_s(g, true);
  if (!m.attn_placeable || !(saved > 0) || static_cast<int64_t>(m.attn_bytes) > room)
    return false;
  *out = Item{ratio_of(saved, m.attn_bytes), saved, m.attn_bytes, il, true, 0};
  return true;
}

}  // namespace

namespace detail {

void greedy_decisions(const std::vector<LayerModel>& models, int64_t room, std::vector<int>& gran,
                      std::vector<bool>& attn) {
  gran.assign(models.size(), 0);
  attn.assign(models.size(), false);
  // Lazy greedy: room only shrinks, so a stored item's ratio is an upper bound on its current
  // one, except where a shared trip makes a layer's other half worth more once one half is on
  // the device: that half's item is pushed afresh then. An item is taken when its recomputed
  // form is still the one stored.
  std::priority_queue<Item, std::vector<Item>, ItemLess> heap;
  for (int il = 0; il < static_cast<int>(models.size()) && room >= 0; ++il) {
    Item it;
    if (attn_item(models[static_cast<size_t>(il)], il, 0, room, &it)) heap.push(it);
    if (next_ffn_item(models[static_cast<size_t>(il)], il, 0, false, room, &it)) heap.push(it);
  }
  while (!heap.empty()) {
    const Item top = heap.top();
    heap.pop();
    const auto l = static_cast<size_t>(top.il);
    Item now;
    if (top.attn && attn[l]) continue;  // a stale duplicate
    const bool ok = top.attn ? attn_item(models[l], top.il, gran[l], room, &now)
                             : next_ffn_item(models[l], top.il, gran[l], attn[l], room, &now);
    if (!ok) continue;
    if (now.ratio != top.ratio || now.to != top.to) {
      heap.push(now);
      continue;
    }
    room -= static_cast<int64_t>(now.bytes);
    Item next;
    if (now.attn) {
      attn[l] = true;
      if (models[l].shared_trip_s > 0 && gran[l] == 0 &&
          next_ffn_item(models[l], top.il, 0, true, room, &next))
        heap.push(next);
      continue;
    }
    const bool first = gran[l] == 0;
    gran[l] = now.to;
    if (next_ffn_item(models[l], top.il, gran[l], attn[l], room, &next)) heap.push(next);
    if (first && !attn[l] && models[l].shared_trip_s > 0 &&
        attn_item(models[l], top.il, gran[l], room, &next))
      heap.push(next);
  }
}

}  // namespace detail

Result<PlanResult> plan_greedy(const PlanInput& in, const PlannerOptions& opt) {
  const double t0 = now_s();
  HC_ASSIGN_OR_RETURN(int64_t room, detail::available_bytes(in, opt));
  const std::vector<LayerModel> models = detail::build_models(in, opt.granule);
  std::vector<int> gran;
  std::vector<bool> attn;
  detail::greedy_decisions(models, room, gran, attn);
  HC_ASSIGN_OR_RETURN(PlanResult r, detail::finish(in, opt, detail::plan_from_decisions(
                                                                in, models, gran, attn),
                                                   "greedy"));
  r.greedy_s = r.prediction.seconds_per_token;
  r.greedy_seconds = now_s() - t0;
  return r;
}

// --- best of both ---------------------------------------------------------------------------

Result<PlanResult> plan_best(const PlanInput& in, const PlannerOptions& opt,
                             const PlacementPlan* previous) {
  HC_ASSIGN_OR_RETURN(PlanResult best, plan_greedy(in, opt));
  const double greedy_s = best.greedy_s, greedy_seconds = best.greedy_seconds;
  auto ilp = plan_ilp(in, opt);
  double ilp_s = std::numeric_limits<double>::quiet_NaN(), ilp_seconds = 0;
  std::string ilp_status;
  if (ilp.ok()) {
    ilp_s = ilp->ilp_s;
    ilp_seconds = ilp->ilp_seconds;
    ilp_status = ilp->ilp_status;
    if (ilp->prediction.seconds_per_token < best.prediction.seconds_per_token)
      best = std::move(ilp).value();
  } else {
    ilp_status = "failed: " + ilp.message();
  }
  if (previous != nullptr) {
    auto pr = predict_plan(in, *previous);
    if (pr.ok() && pr->device_bytes <= opt.budget_bytes &&
        pr->seconds_per_token < best.prediction.seconds_per_token) {
      PlacementPlan p = *previous;
      p.model_id.clear();
      p.stats_id.clear();
      HC_ASSIGN_OR_RETURN(best, detail::finish(in, opt, std::move(p), "previous"));
    }
  }
  best.greedy_s = greedy_s;
  best.greedy_seconds = greedy_seconds;
  best.ilp_s = ilp_s;
  best.ilp_seconds = ilp_seconds;
  best.ilp_status = ilp_status;
  return best;
}

Result<std::vector<PlanResult>> plan_sweep(const PlanInput& in, const PlannerOptions& opt,
                                           const std::vector<uint64_t>& budgets) {
  std::vector<PlanResult> out;
  for (size_t b = 0; b < budgets.size(); ++b) {
    if (b > 0 && budgets[b] < budgets[b - 1])
      return Status::Error("plan_sweep: budgets must ascend, found " +
                           std::to_string(budgets[b - 1]) + " then " + std::to_string(budgets[b]));
    PlannerOptions o = opt;
    o.budget_bytes = budgets[b];
    HC_ASSIGN_OR_RETURN(PlanResult r, plan_best(in, o, out.empty() ? nullptr : &out.back().plan));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hc::sparse
