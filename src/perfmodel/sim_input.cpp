// The projection's inputs and results (perfmodel/sim_input.h).
#include "perfmodel/sim_input.h"

#include "perfmodel/detail.h"

namespace hc::perfmodel {

using detail::fmt;
using detail::kGB;

const ModeResult* SimResult::find(const std::string& mode) const {
  for (const ModeResult& m : modes)
    if (m.mode == mode) return &m;
  return nullptr;
}

const ModeResult* SimResult::llamacpp() const {
  const ModeResult* r = find("llamacpp-cpu-moe");
  return r ? r : find("dense-offload");
}

Status validate_input(const SimInput& in) {
  const ModelBytes& m = in.model;
  if (m.layers.empty() || m.n_ff < 1 || m.n_embd < 1)
    return Status::Error("model '" + m.name + "': no layers or neurons");
  if (m.moe() && !(m.n_expert_used > 0 && m.n_expert_used < m.n_expert))
    return Status::Error("model '" + m.name + "': expected 0 < experts used < experts, found " +
                         std::to_string(m.n_expert_used) + " of " + std::to_string(m.n_expert));
  if (!(in.expert_firing > 0 && in.expert_firing <= 1))
    return Status::Error("expert firing share: expected (0, 1], found " + fmt(in.expert_firing));
  HC_TRY(in.hw.validate());
  HC_TRY(in.eff.validate());
  if (in.profile.size() != m.layers.size())
    return Status::Error("firing statistics: " + std::to_string(in.profile.size()) +
                         " layers, the model has " + std::to_string(m.layers.size()));
  const char* unit = m.moe() ? " experts" : " neurons";
  for (size_t l = 0; l < in.profile.size(); ++l) {
    if (static_cast<int64_t>(in.profile[l].size()) != m.n_units())
      return Status::Error("firing statistics: layer " + std::to_string(l) + " has " +
                           std::to_string(in.profile[l].size()) + unit + ", the model " +
                           std::to_string(m.n_units()));
    for (double p : in.profile[l])
      if (!(p >= 0 && p <= 1))
        return Status::Error("firing statistics: layer " + std::to_string(l) +
                             " has a probability " + fmt(p) + ", expected [0, 1]");
  }
  return Status::Ok();
}

double host_dense_rate(const SimInput& in) { return in.hw.host_read_gbps() * in.eff.dense * kGB; }

Status validate_options(const SimOptions& opt) {
  if (opt.n_ctx < 1) return Status::Error("context: expected >= 1 positions, found " +
                                          std::to_string(opt.n_ctx));
  if (!(opt.max_union_share >= 0 && opt.max_union_share <= 1))
    return Status::Error("union limit: expected a share in [0, 1], found " +
                         fmt(opt.max_union_share));
  if (!(opt.drift >= 0 && opt.drift <= 1))
    return Status::Error("drift: expected a share in [0, 1], found " + fmt(opt.drift));
  if (!(opt.drift_period_tokens > 0))
    return Status::Error("drift period: expected > 0 tokens, found " +
                         fmt(opt.drift_period_tokens));
  if (opt.granule < 1) return Status::Error("granule: expected >= 1, found " +
                                            std::to_string(opt.granule));
  if (opt.predictor_rank < 0)
    return Status::Error("predictor rank: expected >= 0, found " +
                         std::to_string(opt.predictor_rank));
  return Status::Ok();
}

}  // namespace hc::perfmodel
