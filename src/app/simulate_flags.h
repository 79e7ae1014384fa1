// hotcold simulate's flags and the small helpers its files share (app/cmd_simulate.cpp parses
// them; app/simulate_calibration.cpp and app/simulate_inputs.cpp read them).
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "core/status.h"
#include "perfmodel/firing.h"

namespace hc::simcmd {

struct SimFlags {
  std::string shape;   // "" = llama2-7b unless -m names a file
  std::string hw = "rtx4090";
  std::string type;    // "" = q4_0
  std::string stats, calibration, plan, out, model, solver = "greedy";
  std::string twin;  // a statistical twin's firing profile (perfmodel/twin_profile.h)
  float sparsity = -1;  // < 0: not given (power law: 0.9; MoE: the shape's expert sparsity)
  float expert_skew = static_cast<float>(perfmodel::kDefaultExpertSkew);
  int expert_pred_rank = -1;  // < 0: the shape's
  int n_cpu_moe = -1;
  float cover = static_cast<float>(perfmodel::kReluLlamaCoverShare);
  float vram_gib = -1;
  float drift = 0.1f;
  float drift_period = 1024;
  int seed = 1;
  int ctx = 2048;
  int ngl = -1;
  int granule = 32;
  float time_limit = 10;
  bool predictor = false;
  int predictor_rank = 0;
  bool no_output_on_device = false;
  float union_max = 0.5f;
  bool json = false;
  // Overrides.
  float host_gbps = 0, host_eff = 0, dev_gbps = 0, dev_eff = 0, link_gbps = 0;
  float op_us = -1, sync_us = -1;
  float dev_overhead_mib = -1;
  float hybrid_layer_us = -1;  // per split layer, beyond the cost model (-1: the hardware's)  //
                               // device bytes charged at open (context, libraries)
  float emulate_gbps = 0;  // --device-emulate-gbps (host: the paced CPU device)
  // --calibrate.
  bool calibrate = false;
  int threads = 2;
  int device_threads = 1;
  int calib_tokens = 32;
};

// r, its error prefixed with `what`.
template <class T>
Result<T> in_context(Result<T> r, const std::string& what) {
  if (!r.ok()) return r.status().with_context(what);
  return r;
}

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace hc::simcmd
