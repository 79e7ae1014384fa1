// hotcold simulate's inputs from its flags (app/simulate_inputs.h).
#include "app/simulate_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "app/common.h"
#include "app/plan_input.h"
#include "ops/cpu/sparse.h"
#include "perfmodel/simulate.h"

namespace hc::simcmd {
namespace {

uint64_t bytes_of(const TensorView& t) {
  return t.empty() ? 0
                   : static_cast<uint64_t>(row_bytes(t.type, t.ne0)) * static_cast<uint64_t>(t.ne1);
}

}  // namespace

// A real model's bytes, as the engine stores them (plan_input.h's accounting).
Result<perfmodel::ModelBytes> file_model_bytes(const std::string& path) {
  ModelFlags mf;
  mf.model = path;
  mf.no_repack = true;  // sizes only
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  const LlamaHParams& hp = model->hparams();
  if (hp.is_moe())
    return Status::Error("'" + path + "' has " + std::to_string(hp.n_expert) +
                         " experts a layer: a file's MoE shape is not read yet; project the "
                         "catalog's (--model-shape qwen3-30b-a3b, mixtral-8x7b, "
                         "turbosparse-mixtral)");
  perfmodel::ModelBytes m;
  const size_t slash = path.find_last_of('/');
  m.name = slash == std::string::npos ? path : path.substr(slash + 1);
  m.n_embd = hp.n_embd;
  m.n_ff = hp.n_ff;
  m.n_vocab = hp.n_vocab;
  const GgmlType t = model->weights().layers[0].ffn_up.type;
  m.type = lower(dtype_name(t));
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model->weights().layers[static_cast<size_t>(il)];
    perfmodel::LayerBytes b;
    b.attn = layer_attn_bytes(*model, il);
    b.ffn_dense = layer_dense_bytes(*model, il) - b.attn;
    b.gate_row = static_cast<uint64_t>(row_bytes(L.ffn_gate.type, L.ffn_gate.ne0));
    b.up_row = static_cast<uint64_t>(row_bytes(L.ffn_up.type, L.ffn_up.ne0));
    const GgmlType dt = L.ffn_down.empty() ? L.ffn_down_t.type : ops::down_t_type(L.ffn_down.type);
    b.down_t_row = static_cast<uint64_t>(row_bytes(dt, hp.n_embd));
    m.layers.push_back(b);
  }
  m.kv_bytes_per_pos = layer_kv_bytes(*model, 1);
  m.output = bytes_of(model->weights().output) + bytes_of(model->weights().output_norm);
  return m;
}

Result<std::vector<ShapeJob>> shapes_from_flags(const SimFlags& f) {
  std::vector<ShapeJob> out;
  std::string shape = f.shape;
  std::string file;
  if (!f.model.empty()) file = f.model;
  if (shape.rfind("file:", 0) == 0) file = shape.substr(5);
  if (!file.empty()) {
    HC_ASSIGN_OR_RETURN(perfmodel::ModelBytes mb, file_model_bytes(file));
    ShapeJob j;
    if (!dtype_from_name(mb.type, &j.type)) j.type = GgmlType::Q4_0;
    j.bytes = std::move(mb);
    j.from_file = true;
    out.push_back(std::move(j));
    return out;
  }
  GgmlType t = GgmlType::Q4_0;
  const std::string type = f.type.empty() ? "q4_0" : f.type;
  if (!dtype_from_name(type, &t) || perfmodel::bytes_per_weight(t) <= 0)
    return Status::Error("--type: expected a weight type such as f16, q8_0, q4_0, q4_k, found '" +
                         type + "'");
  std::vector<perfmodel::ModelShape> shapes;
  if (shape.empty()) shape = "llama2-7b";
  if (shape == "all") {
    shapes = perfmodel::shape_catalog();
  } else {
    HC_ASSIGN_OR_RETURN(perfmodel::ModelShape s,
                        in_context(perfmodel::find_shape(shape), "--model-shape"));
    shapes.push_back(s);
  }
  for (perfmodel::ModelShape s : shapes) {
    if (s.moe() && f.expert_pred_rank >= 0) s.expert_predictor_rank = f.expert_pred_rank;
    HC_ASSIGN_OR_RETURN(perfmodel::ModelBytes mb, perfmodel::model_bytes(s, t));
    mb.type = lower(mb.type);
    out.push_back({std::move(mb), t, false, s.expert_sparsity, s.expert_predictor_rank});
  }
  return out;
}

Result<std::vector<perfmodel::HardwareSpec>> hardware_from_flags(const SimFlags& f,
                                                              const Calibration* cal) {
  std::vector<perfmodel::HardwareSpec> out;
  if (f.hw == "all") {
    out = perfmodel::hardware_catalog();
    if (cal) {
      HC_ASSIGN_OR_RETURN(perfmodel::HardwareSpec h, host_hardware(*cal));
      out.push_back(h);
    }
  } else if (f.hw == "host") {
    if (!cal)
      return Status::Error(
          "--hw host: this machine's figures come from --calibration "
          "FILE.json (make one with --calibrate -m MODEL.gguf -o FILE.json)");
    HC_ASSIGN_OR_RETURN(perfmodel::HardwareSpec h, host_hardware(*cal));
    out.push_back(h);
  } else {
    HC_ASSIGN_OR_RETURN(perfmodel::HardwareSpec h,
                        in_context(perfmodel::find_hardware(f.hw), "--hw"));
    out.push_back(h);
  }
  for (perfmodel::HardwareSpec& h : out) {
    if (f.emulate_gbps > 0 && h.key == "host") {  // the CPU device paced as bench paces it
      h.dev_peak_gbps = f.emulate_gbps;
      h.dev_eff = 1;
      h.paced_op_us = cal ? cal->sleep_overshoot_us : 0;
    }
    if (f.host_gbps > 0) {
      h.host_peak_gbps = f.host_gbps;
      h.host_read_fraction = 1;
    }
    if (f.dev_gbps > 0) h.dev_peak_gbps = f.dev_gbps;
    if (f.dev_eff > 0) h.dev_eff = f.dev_eff;
    if (f.link_gbps > 0) h.link_gbps = f.link_gbps;
    if (f.op_us >= 0) h.op_us = f.op_us;
    if (f.sync_us >= 0) h.sync_us = f.sync_us;
    if (f.hybrid_layer_us >= 0) h.hybrid_layer_us = f.hybrid_layer_us;
    if (f.dev_overhead_mib >= 0)
      h.dev_overhead_bytes = static_cast<uint64_t>(std::llround(f.dev_overhead_mib * 1048576.0));
    HC_TRY(h.validate());
  }
  return out;
}

namespace {

// Measured routing (an MoE model's statistics, hotcold profile): every layer's expert_count,
// resampled to the shape; for a shape whose experts are sparse and as wide as the profiled
// model's, the measured share of an expert's neurons firing when it is routed to.
Result<Firing> measured_routing(const SimFlags& f, const ShapeJob& sj, const ActStats& st) {
  const perfmodel::ModelBytes& m = sj.bytes;
  if (st.n_expert() == 0)
    return Status::Error("--stats '" + f.stats +
                         "': statistics of a dense model (no routing) for " + m.name +
                         ", whose tokens are routed to " + std::to_string(m.n_expert) +
                         " experts; profile an MoE model, or drop --stats (the routing then "
                         "follows --expert-skew)");
  std::vector<std::vector<double>> counts;
  double routed = 0, fired = 0;
  for (int il = 0; il < st.n_layer(); ++il) {
    const std::vector<float>& c = st.expert_count(il);
    counts.emplace_back(c.begin(), c.end());
    for (float v : c) routed += v;
    for (float v : st.fire_count(il)) fired += v;
  }
  Firing fr;
  HC_ASSIGN_OR_RETURN(fr.profile,
                      in_context(perfmodel::routing_from_counts(counts, st.n_tokens(), m.n_layer(),
                                                             m.n_expert, m.n_expert_used),
                                 "--stats '" + f.stats + "'"));
  const int64_t width = st.n_ff() / st.n_expert();
  const bool same = st.n_layer() == m.n_layer() && st.n_expert() == m.n_expert;
  fr.description = "statistics " + f.stats + " (" + std::to_string(st.n_layer()) + " layers x " +
                   std::to_string(st.n_expert()) + " experts, " + std::to_string(st.n_tokens()) +
                   " tokens" + (same ? "" : ", resampled by rank quantile") + "), " +
                   fmt("%.1f", 100 * perfmodel::neurons_covering(fr.profile[0], 0.8)) +
                   "% of layer 0's experts carry 80% of its routings";
  fr.expert_firing = 1.0 - sj.expert_sparsity;
  if (sj.expert_sparsity > 0 && width == m.n_ff && routed > 0 && fired > 0) {
    fr.expert_firing = std::min(1.0, fired / (routed * static_cast<double>(width)));
    fr.description += "; " + fmt("%.1f", 100 * (1 - fr.expert_firing)) +
                      "% of a routed expert's neurons idle (measured)";
  } else {
    fr.description += sj.expert_sparsity > 0 ? "; " + fmt("%.0f", 100 * sj.expert_sparsity) +
                                                   "% of a routed expert's neurons idle"
                                             : "; dense experts";
  }
  return fr;
}

// An MoE shape's routing: measured (--stats), or the power law over expert ranks
// (--expert-skew).
Result<Firing> routing_for(const SimFlags& f, const ShapeJob& sj, const ActStats* stats) {
  const perfmodel::ModelBytes& m = sj.bytes;
  if (stats) return measured_routing(f, sj, *stats);
  Firing fr;
  HC_ASSIGN_OR_RETURN(
      std::vector<double> p,
      in_context(perfmodel::expert_routing_probs(m.n_expert, m.n_expert_used, f.expert_skew),
                 "--expert-skew"));
  fr.profile.assign(static_cast<size_t>(m.n_layer()), p);
  const double mean = static_cast<double>(m.n_expert_used) / m.n_expert;
  fr.description = std::to_string(m.n_expert_used) + " of " + std::to_string(m.n_expert) +
                   " experts per token, routing power law p(x) = min(1, " +
                   fmt("%.4g", p.back() * std::pow(1 - 0.5 / m.n_expert, f.expert_skew)) + " x^-" +
                   fmt("%.2f", f.expert_skew) + "): the most routed expert takes " +
                   fmt("%.1f", 100 * p[0]) + "% of the tokens (" + fmt("%.2f", p[0] / mean) +
                   "x the mean), " + fmt("%.1f", 100 * perfmodel::neurons_covering(p, 0.8)) +
                   "% of the experts carry 80% of the routings";
  const double sparsity = f.sparsity >= 0 ? f.sparsity : sj.expert_sparsity;
  fr.expert_firing = 1.0 - sparsity;
  if (sparsity > 0)
    fr.description +=
        "; " + fmt("%.0f", 100 * sparsity) + "% of a routed expert's neurons idle" +
        (sj.expert_predictor_rank > 0
             ? ", rank-" + std::to_string(sj.expert_predictor_rank) + " F16 predictors"
             : ", no predictors (every gate row read)");
  else
    fr.description += "; dense experts";
  return fr;
}

}  // namespace

Result<Firing> firing_for(const SimFlags& f, const ShapeJob& sj, const ActStats* stats) {
  const perfmodel::ModelBytes& m = sj.bytes;
  if (m.moe() && !f.twin.empty())
    return Status::Error("--twin '" + f.twin + "': a dense FFN's firing profile, and " + m.name +
                         " has experts (its routing: --stats or --expert-skew)");
  if (m.moe()) return routing_for(f, sj, stats);
  Firing fr;
  if (stats && stats->n_expert() > 0)
    return Status::Error("--stats '" + f.stats + "': statistics of an MoE model (" +
                         std::to_string(stats->n_expert()) +
                         " experts a layer) for the dense shape " + m.name +
                         ": its neurons are the experts', not a dense FFN's");
  if (stats) {
    std::vector<std::vector<double>> src;
    for (int il = 0; il < stats->n_layer(); ++il) {
      HC_ASSIGN_OR_RETURN(std::vector<double> p,
                          sparse::fire_probabilities(stats->fire_count(il), stats->n_tokens()));
      src.push_back(std::move(p));
    }
    HC_ASSIGN_OR_RETURN(fr.profile, in_context(perfmodel::rescale_firing(src, m.n_layer(), m.n_ff),
                                                "--stats '" + f.stats + "'"));
    const bool same = stats->n_layer() == m.n_layer() && stats->n_ff() == m.n_ff;
    fr.description = "statistics " + f.stats + " (" + std::to_string(stats->n_layer()) + " x " +
                     std::to_string(stats->n_ff()) + ", " + std::to_string(stats->n_tokens()) +
                     " tokens" + (same ? "" : ", resampled by rank quantile") + ")";
    return fr;
  }
  if (!f.twin.empty()) {  // every layer as hc-synth-model --twin targets it
    const perfmodel::TwinSpec* t = perfmodel::find_twin(f.twin);
    if (!t) return Status::Error("--twin: expected one of " + perfmodel::twin_names() +
                                 ", found '" + f.twin + "'");
    // By rank (neuron i the i-th most frequent; the projection needs no identities), one curve
    // per distinct target: the layers' U over depth is symmetric.
    std::map<double, std::vector<double>> curves;
    for (int il = 0; il < m.n_layer(); ++il) {
      const double top80 = perfmodel::twin_top80(*t, il, m.n_layer());
      auto it = curves.find(top80);
      if (it == curves.end())
        it = curves.emplace(top80, perfmodel::twin_curve(m.n_ff, t->firing, top80)).first;
      fr.profile.push_back(it->second);
    }
    fr.description = "statistical twin " + std::string(t->name) + " (" +
                     fmt("%.0f", 100 * t->firing) + "% firing, " + fmt("%.0f", 100 * t->top80_mid) +
                     "-" + fmt("%.0f", 100 * t->top80_ends) +
                     "% of a layer's neurons carrying 80% of its firings, middle to ends; " +
                     t->source + ")";
    return fr;
  }
  const double share =
      1.0 - (f.sparsity >= 0 ? f.sparsity : 1.0 - perfmodel::kPowerInferFiringShare);
  HC_ASSIGN_OR_RETURN(
      perfmodel::PowerLaw pl,
      in_context(perfmodel::fit_power_law(m.n_ff, share, f.cover), "--sparsity / --cover80"));
  const std::vector<double> p = perfmodel::power_law_probs(pl, m.n_ff);
  fr.profile.assign(static_cast<size_t>(m.n_layer()), p);
  fr.description = "power law p(x) = min(1, " + fmt("%.4g", pl.c) + " x^-" + fmt("%.4f", pl.a) +
                   ") fitted to " + fmt("%.1f", 100 * share) + "% firing and " +
                   fmt("%.1f", 100.0 * f.cover) + "% of neurons carrying 80% of the firings";
  return fr;
}

}  // namespace hc::simcmd
