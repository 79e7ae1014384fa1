// hotcold simulate's inputs from its flags: the shapes to project (catalog shapes or a real
// file's bytes), the hardware (catalog, or this machine from a calibration, with the flags'
// overrides) and each shape's firing statistics (a power law, a routing skew, or a profile).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "app/simulate_calibration.h"
#include "app/simulate_flags.h"
#include "core/dtype.h"
#include "core/status.h"
#include "model/act_stats.h"
#include "perfmodel/simulate.h"
#include "perfmodel/twin_profile.h"

namespace hc::simcmd {

struct ShapeJob {
  perfmodel::ModelBytes bytes;
  GgmlType type = GgmlType::Q4_0;  // the FFN's type (efficiency lookup)
  bool from_file = false;
  double expert_sparsity = 0;  // MoE: the shape's published share of idle expert neurons
  int64_t expert_predictor_rank = 0;
};

// A real model's bytes, as the engine stores them (plan_input.h's accounting).
Result<perfmodel::ModelBytes> file_model_bytes(const std::string& path);
Result<std::vector<ShapeJob>> shapes_from_flags(const SimFlags& f);
Result<std::vector<perfmodel::HardwareSpec>> hardware_from_flags(const SimFlags& f,
                                                                 const Calibration* cal);

// Per-layer firing of the profiling distribution for one shape.
struct Firing {
  std::string description;
  std::vector<std::vector<double>> profile;  // [n_layer][n_units]
  double expert_firing = 1;                  // MoE: share of a routed expert's neurons firing
};

// Per-layer firing of the profiling distribution for one shape: measured (stats, resampled to
// the shape), or the power law / routing skew the flags give.
Result<Firing> firing_for(const SimFlags& f, const ShapeJob& sj, const ActStats* stats);

}  // namespace hc::simcmd
