#include "app/dynamic_setup.h"

#include <cstdlib>

#include "core/log.h"
#include "model/act_stats.h"

namespace hc {

void add_dynamic_flags(ArgParser& p, DynamicFlags* f) {
  p.add_flag("--dynamic", &f->dynamic,
             "adjust each layer's sparsity threshold online toward --dyn-target (needs a sparse "
             "FFN: --sparsity/--stats, --sparse or --predictor)");
  p.add_string("--dyn-target", &f->target,
               "what --dynamic holds per layer: recall:R (share of activation mass computed) or "
               "sparsity:S (share of neurons skipped)");
  p.add_flag("--migrate", &f->migrate,
             "move hot neurons between host and device as their firing drifts (needs hot "
             "neurons on a device: --plan or --vram-budget with --stats)");
  p.add_flag("--dyn-watch", &f->watch,
             "collect the online firing statistics only (what --dynamic and --migrate watch; "
             "measures their overhead), thresholds and placement stay fixed");
  p.add_int("--dyn-audit", &f->audit_every,
            "with a device or a predictor, observe every neuron on one forward call in N "
            "(host-only thresholds observe every call for free)");
  p.add_float("--dyn-half-life", &f->half_life,
              "half-life of the online firing counters, in observed tokens");
  p.add_int("--migrate-every", &f->migrate_every,
            "observed tokens between migration rounds");
  p.add_float("--hysteresis", &f->hysteresis,
              "a cold neuron replaces a hot one only when it fired this much more often "
              "(0.25 = 25% more)");
  p.add_int("--max-swaps", &f->max_swaps, "neurons migrated per layer and round");
  p.add_float("--dyn-gain", &f->gain,
              "controller gain per unit of log error (in logit units with --predictor, where it "
              "must suit the logits' scale)");
  p.add_float("--dyn-max-step", &f->max_step,
              "largest threshold change per controller step (ln units, or logits with "
              "--predictor)");
}

Result<DynamicOptions> dynamic_options(const DynamicFlags& f) {
  DynamicOptions o;
  o.control = f.dynamic;
  o.migrate = f.migrate;
  const size_t colon = f.target.find(':');
  const std::string kind = f.target.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : f.target.substr(colon + 1);
  char* end = nullptr;
  const double v = value.empty() ? 0.0 : std::strtod(value.c_str(), &end);
  if ((kind != "recall" && kind != "sparsity") || value.empty() || *end != '\0' || !(v > 0) ||
      !(v < 1))
    return Status::Error("--dyn-target: expected recall:R or sparsity:S with 0 < value < 1, found '" +
                         f.target + "'");
  o.controller.target = kind == "recall" ? sparse::ControllerParams::Target::kRecall
                                         : sparse::ControllerParams::Target::kSparsity;
  o.controller.target_value = v;
  if (f.audit_every < 1)
    return Status::Error("--dyn-audit: expected N >= 1, found " + std::to_string(f.audit_every));
  if (!(f.half_life >= 1))
    return Status::Error("--dyn-half-life: expected >= 1 token, found " +
                         std::to_string(f.half_life));
  if (f.migrate_every < 1)
    return Status::Error("--migrate-every: expected N >= 1, found " +
                         std::to_string(f.migrate_every));
  if (!(f.hysteresis >= 0))
    return Status::Error("--hysteresis: expected F >= 0, found " + std::to_string(f.hysteresis));
  if (f.max_swaps < 1)
    return Status::Error("--max-swaps: expected N >= 1, found " + std::to_string(f.max_swaps));
  if (f.gain < 0 || f.max_step < 0)
    return Status::Error("--dyn-gain / --dyn-max-step: expected values >= 0");
  if (f.gain > 0) o.controller.gain = f.gain;
  if (f.max_step > 0) o.controller.max_step = f.max_step;
  o.audit_every = f.audit_every;
  o.half_life = f.half_life;
  o.migrate_every = f.migrate_every;
  o.migration.hysteresis = f.hysteresis;
  o.migration.max_swaps = f.max_swaps;
  return o;
}

Result<std::shared_ptr<DynamicSparsity>> make_dynamic(const LlamaModel& model,
                                                      const DynamicFlags& f,
                                                      const SparseFfn* sparse, DeviceModel* dm,
                                                      const std::string& stats_path) {
  if (!f.enabled()) return std::shared_ptr<DynamicSparsity>();
  if (!sparse && !model.hparams().is_moe())
    return Status::Error(std::string(f.dynamic ? "--dynamic" : f.migrate ? "--migrate" : "--dyn-watch") +
                         " needs a sparse FFN (--sparsity S --stats FILE, --sparse or --predictor)");
  HC_ASSIGN_OR_RETURN(DynamicOptions opt, dynamic_options(f));
  HC_ASSIGN_OR_RETURN(std::unique_ptr<DynamicSparsity> dyn,
                      DynamicSparsity::create(model, sparse, dm, opt));
  if (!stats_path.empty()) {
    HC_ASSIGN_OR_RETURN(ActStats stats, ActStats::read(stats_path));
    HC_TRY(dyn->seed(stats));
  }
  HC_LOG_INFO("dynamic sparsity: %s%s%s, audit 1/%d, half-life %.0f tokens",
              f.dynamic ? "thresholds toward " : "", f.dynamic ? f.target.c_str() : "",
              f.migrate ? (f.dynamic ? " + migration" : "migration")
                        : (f.dynamic ? "" : "statistics only"),
              f.audit_every, static_cast<double>(f.half_life));
  return std::shared_ptr<DynamicSparsity>(std::move(dyn));
}

Result<std::shared_ptr<DynamicSparsity>> attach_dynamic(Session& session, const DynamicFlags& f,
                                                        const SparseFfn* sparse, DeviceModel* dm,
                                                        const std::string& stats_path) {
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DynamicSparsity> dyn,
                      make_dynamic(session.model(), f, sparse, dm, stats_path));
  if (dyn) session.set_dynamic(dyn);
  return dyn;
}

}  // namespace hc
