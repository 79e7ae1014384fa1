// plan_ilp: the placement problem as a mixed-integer program, solved in process by GLPK's
// branch and bound (glp_intopt, with a time limit), started from the greedy plan (or, with
// PlannerOptions::ilp_presolve, from GLPK's MIP presolver instead).
//
// Per layer l (times in microseconds, bytes in MiB to keep GLPK's tolerances meaningful):
//   y[l][g] binary   granule g (frequency order) on the device; y[l][g] >= y[l][g+1]
//   u[l]    binary   the FFN uses the device: u[l] >= y[l][0] (fixed to 1 with device predictors)
//   a[l]    binary   attention on the device (only when that would save time)
//   T[l]    >= 0     the FFN's max(device part, host part):
//     T[l] >= host_all - sum_g host_saved[g] y[l][g] - pred_host a[l]  (a predictor that
//             follows the attention to the device leaves the host part)
//     T[l] >= sum_g dev[g] y[l][g] + ops * u[l] + dev_const
// minimise  sum_l T[l] + trip * u[l] - attn_saved[l] * a[l]
// s.t.      sum_l (sum_g bytes[g] y[l][g] + attn_bytes[l] a[l]) <= budget - base bytes
// The rounded solution is checked against the exact byte budget (and trimmed if GLPK's
// tolerance let it pass by a few bytes).
#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/log.h"
#include "sparse/planner.h"
#include "sparse/planner_internal.h"

namespace hc::sparse {

namespace {

using detail::LayerModel;

constexpr double kMiB = 1048576.0;
constexpr double kToUs = 1e6;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct ProbDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};
using Prob = std::unique_ptr<glp_prob, ProbDeleter>;

// Column indices (1-based, GLPK's) of one layer's variables; a == 0 when attention is fixed
// on the host.
// z (0 = none): attention and the FFN both on the device, sharing one trip (z <= a, z <= u).
struct LayerCols {
  int y0 = 0, n_y = 0, u = 0, t = 0, a = 0, z = 0;
};

// The constraint matrix as triplets (GLPK's ia / ja / ar, index 0 unused).
struct Triplets {
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0.0};
  void add(int row, int col, double v) {
    ia.push_back(row);
    ja.push_back(col);
    ar.push_back(v);
  }
};

int add_col(glp_prob* P, int kind, double lb, double ub, double cost) {
  const int j = glp_add_cols(P, 1);
  glp_set_col_kind(P, j, kind);
  if (kind == GLP_CV) glp_set_col_bnds(P, j, GLP_LO, lb, 0.0);
  else glp_set_col_bnds(P, j, lb == ub ? GLP_FX : GLP_DB, lb, ub);
  glp_set_obj_coef(P, j, cost);
  return j;
}

int add_row(glp_prob* P, int type, double lb, double ub) {
  const int i = glp_add_rows(P, 1);
  glp_set_row_bnds(P, i, type, lb, ub);
  return i;
}

// Every layer's columns, ordered attention blocks first, then the "uses device" flags, then
// granules: branching on the first fractional column then settles the big decisions first
// (a fractional attention block is what makes the LP bound weak).
std::vector<LayerCols> add_columns(glp_prob* P, const std::vector<LayerModel>& models,
                                   int64_t room) {
  std::vector<LayerCols> cols(models.size());
  for (size_t l = 0; l < models.size(); ++l) {
    const LayerModel& lm = models[l];
    if (lm.attn_placeable && lm.attn_saved_s + lm.shared_trip_s + lm.pred_host_s > 0 &&
        static_cast<int64_t>(lm.attn_bytes) <= room)
      cols[l].a = add_col(P, GLP_BV, 0, 1, -lm.attn_saved_s * kToUs);
  }
  for (size_t l = 0; l < models.size(); ++l)
    cols[l].u = add_col(P, GLP_BV, models[l].pred_on_device ? 1 : 0, 1, models[l].trip_s * kToUs);
  for (size_t l = 0; l < models.size(); ++l) {
    cols[l].n_y = models[l].n_gran();
    cols[l].y0 = glp_get_num_cols(P) + 1;
    for (int g = 0; g < cols[l].n_y; ++g) add_col(P, GLP_BV, 0, 1, 0.0);
  }
  for (size_t l = 0; l < models.size(); ++l) cols[l].t = add_col(P, GLP_CV, 0, 0, 1.0);
  for (size_t l = 0; l < models.size(); ++l)
    if (cols[l].a != 0 && models[l].shared_trip_s > 0)
      cols[l].z = add_col(P, GLP_BV, 0, 1, -models[l].shared_trip_s * kToUs);
  return cols;
}

// One layer's rows (its entries of the budget row go to `budget_row`).
void add_rows(glp_prob* P, Triplets& m, const LayerModel& lm, const LayerCols& c, int budget_row) {
  if (c.a != 0) m.add(budget_row, c.a, static_cast<double>(lm.attn_bytes) / kMiB);
  for (int g = 0; g + 1 < c.n_y; ++g) {  // y[g] - y[g+1] >= 0
    const int r = add_row(P, GLP_LO, 0, 0);
    m.add(r, c.y0 + g, 1);
    m.add(r, c.y0 + g + 1, -1);
  }
  const int link = add_row(P, GLP_LO, 0, 0);  // u - y[0] >= 0
  m.add(link, c.u, 1);
  m.add(link, c.y0, -1);
  if (c.z != 0) {  // z <= a, z <= u: the shared trip is saved only with both on the device
    const int za = add_row(P, GLP_UP, 0, 0);
    m.add(za, c.z, 1);
    m.add(za, c.a, -1);
    const int zu = add_row(P, GLP_UP, 0, 0);
    m.add(zu, c.z, 1);
    m.add(zu, c.u, -1);
  }
  const int host = add_row(P, GLP_LO, lm.host_all_s * kToUs, 0);
  const int dev = add_row(P, GLP_LO, lm.dev_const_s * kToUs, 0);
  m.add(host, c.t, 1);
  if (c.a != 0 && lm.pred_host_s > 0) m.add(host, c.a, lm.pred_host_s * kToUs);
  m.add(dev, c.t, 1);
  m.add(dev, c.u, -lm.ops_s * kToUs);
  for (int g = 0; g < c.n_y; ++g) {
    const auto s = static_cast<size_t>(g);
    m.add(host, c.y0 + g, (lm.host_saved_s[s + 1] - lm.host_saved_s[s]) * kToUs);
    m.add(dev, c.y0 + g, -(lm.dev_s[s + 1] - lm.dev_s[s]) * kToUs);
    m.add(budget_row, c.y0 + g,
          static_cast<double>(lm.ffn_bytes(g + 1) - lm.ffn_bytes(g)) / kMiB);
  }
}

// Layers whose attention blocks are interchangeable (same bytes, same time saved, and no trip
// shared with the FFN, whose placement would then matter) get a[l1] >= a[l2] >= ... in layer
// order. This changes no optimum value, but without it branch and bound explores every way of
// choosing which of n identical blocks go on the device (LLaMA's layers are all alike).
void break_attention_symmetry(glp_prob* P, Triplets& m, const std::vector<LayerModel>& models,
                              const std::vector<LayerCols>& cols) {
  for (size_t l = 0; l < models.size(); ++l) {
    // (A predictor that follows the attention ties it to the FFN's host part too.)
    if (cols[l].a == 0 || cols[l].z != 0 || models[l].pred_host_s > 0) continue;
    for (size_t k = l; k-- > 0;) {
      if (cols[k].a != 0 && cols[k].z == 0 && models[k].pred_host_s == 0 &&
          models[k].attn_bytes == models[l].attn_bytes &&
          models[k].attn_saved_s == models[l].attn_saved_s) {
        const int r = add_row(P, GLP_LO, 0, 0);  // a[k] - a[l] >= 0
        m.add(r, cols[k].a, 1);
        m.add(r, cols[l].a, -1);
        break;
      }
    }
  }
}

struct Progress {
  double t0 = 0, last_log = 0;
  bool log = false;
  double gap = -1;  // relative gap of the incumbent, -1 before one exists
  const std::vector<double>* seed = nullptr;  // [1 + n_cols] a first incumbent, or null
  bool seeded = false;
};

// The column values (GLPK's x[1..n]) of given decisions, for glp_ios_heur_sol.
std::vector<double> column_values(glp_prob* P, const std::vector<LayerModel>& models,
                                  const std::vector<LayerCols>& cols, const std::vector<int>& gran,
                                  const std::vector<bool>& attn) {
  std::vector<double> x(static_cast<size_t>(glp_get_num_cols(P)) + 1, 0.0);
  for (size_t l = 0; l < models.size(); ++l) {
    const LayerModel& m = models[l];
    const LayerCols& c = cols[l];
    const int g = gran[l];
    const bool uses = g > 0 || m.pred_on_device;
    if (c.a != 0) x[static_cast<size_t>(c.a)] = attn[l] ? 1 : 0;
    x[static_cast<size_t>(c.u)] = uses ? 1 : 0;
    if (c.z != 0) x[static_cast<size_t>(c.z)] = attn[l] && uses ? 1 : 0;
    for (int k = 0; k < g; ++k) x[static_cast<size_t>(c.y0 + k)] = 1;
    const double host =
        std::max(0.0, m.host_all_s - (attn[l] ? m.pred_host_s : 0.0) -
                          m.host_saved_s[static_cast<size_t>(g)]);
    const double dev = m.dev_s[static_cast<size_t>(g)] + (uses ? m.ops_s : 0) + m.dev_const_s;
    x[static_cast<size_t>(c.t)] = std::max(host, dev) * kToUs;
  }
  return x;
}

void on_glpk_event(glp_tree* tree, void* info) {
  auto* p = static_cast<Progress*>(info);
  if (glp_ios_reason(tree) == GLP_IHEUR && p->seed != nullptr && !p->seeded) {
    p->seeded = true;
    glp_ios_heur_sol(tree, p->seed->data());
  }
  const double gap = glp_ios_mip_gap(tree);
  if (gap < 1e300) p->gap = gap;
  const double t = now_s();
  if (!p->log || t - p->t0 < 2.0 || t - p->last_log < 2.0) return;
  p->last_log = t;
  int active = 0, total = 0;
  glp_ios_tree_size(tree, &active, nullptr, &total);
  if (p->gap >= 0)
    HC_LOG_INFO("plan: ILP %.0f s, %d nodes (%d active), gap %.3g%%", t - p->t0, total, active,
                100 * p->gap);
  else
    HC_LOG_INFO("plan: ILP %.0f s, %d nodes (%d active), no integer solution yet", t - p->t0,
                total, active);
}

// Trims the decisions until they fit `room`: each step drops the granule or attention block
// whose removal costs the least time per byte.
void trim_to_room(const std::vector<LayerModel>& models, int64_t room, std::vector<int>& gran,
                  std::vector<bool>& attn) {
  while (static_cast<int64_t>(detail::decision_bytes(models, gran, attn)) > room) {
    double best = INFINITY;
    size_t best_l = 0;
    bool best_attn = false;
    for (size_t l = 0; l < models.size(); ++l) {
      const LayerModel& m = models[l];
      if (gran[l] > 0) {
        const int g = gran[l];
        const double loss = (m.layer_s(g - 1, attn[l]) - m.layer_s(g, attn[l])) /
                            static_cast<double>(m.ffn_bytes(g) - m.ffn_bytes(g - 1));
        if (loss < best) {
          best = loss;
          best_l = l;
          best_attn = false;
        }
      }
      if (attn[l]) {
        const double loss = (m.layer_s(gran[l], false) - m.layer_s(gran[l], true)) /
                            static_cast<double>(std::max<uint64_t>(m.attn_bytes, 1));
        if (loss < best) {
          best = loss;
          best_l = l;
          best_attn = true;
        }
      }
    }
    if (best_attn) attn[best_l] = false;
    else --gran[best_l];
  }
}

std::string describe(int ret, int mip_status, double gap, double limit_s) {
  char buf[96];
  if (ret == 0 && mip_status == GLP_OPT) return "optimal";
  if (ret == GLP_EMIPGAP || (ret == 0 && mip_status == GLP_FEAS)) {
    std::snprintf(buf, sizeof buf, "optimal within gap %.3g%%", 100 * std::max(gap, 0.0));
    return buf;
  }
  if (ret == GLP_ETMLIM) {
    std::snprintf(buf, sizeof buf, "time limit %.3g s: gap %.3g%%", limit_s,
                  100 * std::max(gap, 0.0));
    return buf;
  }
  return "glp_intopt returned " + std::to_string(ret);
}

// The whole program (objective constant: const_us); *cols receives each layer's columns.
Prob build_problem(const std::vector<LayerModel>& models, int64_t room, double const_us,
                   std::vector<LayerCols>* cols) {
  Prob P(glp_create_prob());
  glp_set_obj_dir(P.get(), GLP_MIN);
  const int budget_row = add_row(P.get(), GLP_UP, 0, static_cast<double>(room) / kMiB);
  Triplets m;
  *cols = add_columns(P.get(), models, room);
  for (size_t l = 0; l < models.size(); ++l)
    add_rows(P.get(), m, models[l], (*cols)[l], budget_row);
  break_attention_symmetry(P.get(), m, models, *cols);
  glp_load_matrix(P.get(), static_cast<int>(m.ia.size()) - 1, m.ia.data(), m.ja.data(),
                  m.ar.data());
  // The constant term makes the objective the predicted time itself, so the relative MIP gap
  // is relative to that (without it the attention terms push the objective towards 0).
  glp_set_obj_coef(P.get(), 0, const_us);
  return P;
}

int to_ms(double s) { return static_cast<int>(std::clamp(s * 1000.0, 1.0, double{INT_MAX})); }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

// The LP relaxation, which glp_intopt without its presolver needs solved (an optimal basis).
Status solve_relaxation(glp_prob* P, double limit_s) {
  glp_smcp sm;
  glp_init_smcp(&sm);
  sm.msg_lev = GLP_MSG_OFF;
  sm.tm_lim = to_ms(limit_s);
  const int ret = glp_simplex(P, &sm);
  if (ret == GLP_ETMLIM)
    return Status::Error("ILP: the LP relaxation was not solved within the time limit of " +
                         seconds_text(limit_s));
  if (ret != 0 || glp_get_status(P) != GLP_OPT)
    return Status::Error("ILP: GLPK's simplex failed on the LP relaxation (code " +
                         std::to_string(ret) + ", status " + std::to_string(glp_get_status(P)) +
                         ")");
  return Status::Ok();
}

glp_iocp intopt_params(const PlannerOptions& opt, double limit_s, Progress* prog) {
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = opt.ilp_presolve ? GLP_ON : GLP_OFF;
  parm.tm_lim = to_ms(limit_s);
  parm.mip_gap = opt.ilp_mip_gap;
  // Measured on 7B-shaped problems (docs/PLANNER.md): first-fractional branching (with the
  // column order of add_columns) finds integer solutions where GLPK's default heuristic finds
  // none in 30 s, and MIR + Gomory cuts close the gap faster.
  parm.br_tech = GLP_BR_FFV;
  parm.mir_cuts = GLP_ON;
  parm.gmi_cuts = GLP_ON;
  parm.cb_func = on_glpk_event;
  parm.cb_info = prog;
  return parm;
}

// Builds and solves; fills gran / attn from the integer solution. Without the presolver the
// greedy plan is handed to branch and bound as its first incumbent (GLPK's presolver renumbers
// the columns, and glp_ios_heur_sol takes the presolved problem's), so the ILP's answer is
// never worse than greedy's and the gap closes from a good upper bound.
Status solve(const std::vector<LayerModel>& models, int64_t room, double const_us,
             const PlannerOptions& opt, std::vector<int>& gran, std::vector<bool>& attn,
             std::string* status) {
  Progress prog;
  prog.t0 = now_s();
  prog.log = opt.log_progress;
  std::vector<LayerCols> cols;
  Prob P = build_problem(models, room, const_us, &cols);
  const int was_on = glp_term_out(GLP_OFF);
  std::vector<double> seed;
  Status st;
  if (!opt.ilp_presolve) {
    std::vector<int> g0;
    std::vector<bool> a0;
    detail::greedy_decisions(models, room, g0, a0);
    seed = column_values(P.get(), models, cols, g0, a0);
    prog.seed = &seed;
    st = solve_relaxation(P.get(), opt.ilp_time_limit_s);
  }
  int ret = -1;
  if (st.ok()) {
    const glp_iocp parm =
        intopt_params(opt, opt.ilp_time_limit_s - (now_s() - prog.t0), &prog);
    ret = glp_intopt(P.get(), &parm);
  }
  glp_term_out(was_on);
  HC_TRY(st);
  const int mip = glp_mip_status(P.get());
  *status = describe(ret, mip, prog.gap, opt.ilp_time_limit_s);
  if (mip != GLP_OPT && mip != GLP_FEAS) {
    if (ret == GLP_ETMLIM)
      return Status::Error("ILP: no integer solution within the time limit of " +
                           seconds_text(opt.ilp_time_limit_s));
    return Status::Error("ILP: GLPK found no integer solution (" + *status + ")");
  }
  for (size_t l = 0; l < models.size(); ++l) {
    const LayerCols& c = cols[l];
    int g = 0;  // the ordering rows make the chosen granules a prefix
    while (g < c.n_y && glp_mip_col_val(P.get(), c.y0 + g) > 0.5) ++g;
    gran[l] = g;
    attn[l] = c.a != 0 && glp_mip_col_val(P.get(), c.a) > 0.5;
  }
  return Status::Ok();
}

// Everything in the predicted time that no variable moves: other_s and attention on the host.
double constant_us(const PlanInput& in, const std::vector<LayerModel>& models) {
  double s = in.other_s;
  for (const LayerModel& m : models) s += m.attn_host_s;
  return s * kToUs;
}

}  // namespace

Result<PlanResult> plan_ilp(const PlanInput& in, const PlannerOptions& opt) {
  const double t0 = now_s();
  HC_ASSIGN_OR_RETURN(int64_t room, detail::available_bytes(in, opt));
  const std::vector<LayerModel> models = detail::build_models(in, opt.granule);
  std::vector<int> gran(models.size(), 0);
  std::vector<bool> attn(models.size(), false);
  std::string status = "nothing fits the budget";
  if (room >= 0) {
    if (opt.log_progress && in.n_layer() * in.n_ff() / opt.granule > 20000)
      HC_LOG_INFO("plan: ILP over %lld granules, time limit %.3g s",
                  static_cast<long long>(in.n_layer() * in.n_ff() / opt.granule),
                  opt.ilp_time_limit_s);
    const Status st = solve(models, room, constant_us(in, models), opt, gran, attn, &status);
    if (!st.ok() && opt.log_progress && now_s() - t0 > 2.0)
      HC_LOG_INFO("plan: %s after %.1f s", st.message().c_str(), now_s() - t0);
    HC_TRY(st);
    trim_to_room(models, room, gran, attn);
  }
  HC_ASSIGN_OR_RETURN(PlanResult r,
                      detail::finish(in, opt, detail::plan_from_decisions(in, models, gran, attn),
                                     "ilp"));
  r.ilp_s = r.prediction.seconds_per_token;
  r.ilp_status = status;
  r.ilp_seconds = now_s() - t0;
  if (opt.log_progress && r.ilp_seconds > 2.0)
    HC_LOG_INFO("plan: ILP %s after %.1f s", status.c_str(), r.ilp_seconds);
  return r;
}

}  // namespace hc::sparse
