// Dynamic sparsity flags for run, bench, perplexity and eval (model/dynamic_sparsity.h):
// per-layer threshold control toward a target, and hot-neuron migration on a device.
#pragma once
#include <memory>
#include <string>

#include "app/args.h"
#include "app/common.h"
#include "model/dynamic_sparsity.h"

namespace hc {

struct DynamicFlags {
  bool dynamic = false;                // --dynamic: adjust thresholds online
  std::string target = "recall:0.99";  // --dyn-target recall:R | sparsity:S
  bool migrate = false;                // --migrate: move hot neurons host <-> device
  bool watch = false;                  // --dyn-watch: only the online statistics
  int audit_every = 4;                 // --dyn-audit N
  float half_life = 256;               // --dyn-half-life TOKENS
  int migrate_every = 16;              // --migrate-every TOKENS
  float hysteresis = 0.25f;            // --hysteresis F
  int max_swaps = 64;                  // --max-swaps N (per layer and round)
  float gain = 0, max_step = 0;        // --dyn-gain, --dyn-max-step (0: the controller's defaults)
  bool enabled() const { return dynamic || migrate || watch; }
};

void add_dynamic_flags(ArgParser& p, DynamicFlags* f);
// The options the flags describe (errors: a malformed target, values out of range).
Result<DynamicOptions> dynamic_options(const DynamicFlags& f);

// The dynamic sparsity the flags ask for (null when they ask for none), for `model`: what
// attach_dynamic attaches, or a server's scheduler (SchedulerDevice).
Result<std::shared_ptr<DynamicSparsity>> make_dynamic(const LlamaModel& model,
                                                      const DynamicFlags& f,
                                                      const SparseFfn* sparse, DeviceModel* dm,
                                                      const std::string& stats_path);

// Builds the dynamic sparsity the flags ask for and attaches it to the session (nothing when
// they ask for none). sparse: the session's sparse FFN (required when enabled); dm: its device
// model or null; stats_path: the profile the placement came from ("" none), whose firing
// frequencies seed the counters so migration starts from the profile's belief, not from zero.
Result<std::shared_ptr<DynamicSparsity>> attach_dynamic(Session& session, const DynamicFlags& f,
                                                        const SparseFfn* sparse, DeviceModel* dm,
                                                        const std::string& stats_path);

}  // namespace hc
