// Dynamic sparsity for one session: online firing statistics, per-layer threshold control and
// hot-neuron migration between the host and a second device (docs/DYNAMIC.md).
//
// It is the session's SparseMonitor (model/sparse_ffn.h): the forward pass asks audit() per
// layer call and, on audited calls, passes every neuron's act(gate) with the firing decision.
//   - Host-only magnitude thresholds: every call is audited (all acts are computed anyway).
//   - Hybrid layers and predictors: one call in audit_every is audited; the host then also
//     computes the gate of the neurons it would skip (the device's hot rows from its own copy,
//     or the dense gate behind a predictor). That is the cost of watching; bench measures it.
// From each audited token of each layer:
//   - FiringCounters (sparse/firing_counters.h) get the fired set (decayed, half-life in audited
//     tokens);
//   - the ThresholdController (sparse/threshold_controller.h) gets the layer's recall of
//     activation mass (sum |a| over fired / sum |a| over all) and its firing share, and moves the
//     layer's threshold (magnitude, or predictor logit) toward its target;
//   - the trace records the share of firing mass the device held (the "GPU hit ratio").
// After each forward call (end_call), every migrate_every audited tokens, each hybrid layer's hot
// set is compared with the counters (sparse/migration.h: hysteresis, at most max_swaps) and the
// swaps go to DeviceModel::migrate (row copies queued on the device, index lists swapped).
//
// A mixture-of-experts model (no sparse FFN) is placed by experts: the object is then the
// session's MoeMonitor, every routing is observed (it is computed anyway), the counters count
// each layer's routings per expert, "fired" means routed (a token's n_expert_used experts),
// activation mass is the routing weight (recall 1), and migration moves whole experts
// (DeviceModel::migrate_experts). Threshold control does not apply there.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/act_stats.h"
#include "model/device_model.h"
#include "model/llama_model.h"
#include "model/moe_ffn.h"
#include "model/sparse_ffn.h"
#include "sparse/firing_counters.h"
#include "sparse/migration.h"
#include "sparse/threshold_controller.h"

namespace hc {

struct DynamicOptions {
  bool control = false;  // adjust thresholds online (else they stay the SparseFfn's)
  sparse::ControllerParams controller;  // log_domain is set from the mode (predictor: linear)
  bool migrate = false;  // move hot neurons between host and device (needs hybrid layers)
  sparse::MigrationParams migration;
  int migrate_every = 16;   // audited tokens between migration rounds
  double half_life = 256;   // firing counters, in audited tokens
  int audit_every = 4;      // hybrid / predictor: audit one layer call in this many
  int trace_every = 1;      // a trace point every this many forward calls (0: none)
};

// One point of the time series (per forward call, over the layers audited in it).
struct DynamicTracePoint {
  uint64_t tokens = 0;          // tokens evaluated so far
  double device_mass = -1;      // share of fired |act| mass held on the device (-1: no device)
  double device_fired = -1;     // share of fired neurons held on the device
  double recall = 0;            // fired |act| mass / all |act| mass
  double sparsity = 0;          // share of neurons not fired
  double mean_threshold = 0;    // mean over layers of the current thresholds
  uint64_t migrated = 0;        // neurons migrated so far
};

struct DynamicTotals {
  uint64_t audited_tokens = 0;  // layer-token observations / n_layer
  uint64_t migration_rounds = 0, swaps = 0, migrated_bytes = 0;
  double fired_mass = 0, total_mass = 0, device_mass = 0;  // over every audited observation
  double fired = 0, seen = 0, device_fired = 0;
  double observe_seconds = 0;  // time spent in observe() (the overhead of watching)
  double migrate_seconds = 0;  // time spent planning and queueing migrations
  double recall() const { return total_mass > 0 ? fired_mass / total_mass : 0; }
  double sparsity() const { return seen > 0 ? 1.0 - fired / seen : 0; }
  double device_mass_share() const { return fired_mass > 0 ? device_mass / fired_mass : 0; }
  double device_fired_share() const { return fired > 0 ? device_fired / fired : 0; }
};

class DynamicSparsity final : public SparseMonitor, public MoeMonitor {
 public:
  // dm (may be null): the session's device model when migration or device statistics are
  // wanted; it must outlive this object. sparse: the session's sparse FFN; null only for a
  // mixture-of-experts model. Errors: migrate without a hybrid layer (or experts) in dm,
  // control on a mixture of experts, parameters out of range.
  static Result<std::unique_ptr<DynamicSparsity>> create(const LlamaModel& model,
                                                         const SparseFfn* sparse, DeviceModel* dm,
                                                         const DynamicOptions& opt);

  // Seeds the firing counters with a profile's frequencies (worth half_life tokens), so the
  // first migrations compare against what the placement was planned from. Errors: statistics
  // of another shape.
  Status seed(const ActStats& stats);
  // Points the session's sparse scratch at this object's thresholds and monitor (a dense FFN),
  // or its MoE scratch at this monitor (experts).
  void attach(SparseScratch& sc);
  void attach(MoeScratch& sc);
  // SparseMonitor.
  bool audit() const override { return audit_now_; }
  void observe(int il, const float* act, const uint8_t* fire, int64_t n_tok,
               int64_t n_ff) override;
  // MoeMonitor.
  void on_routing(int il, const MoeRouting& r) override;
  // Around every forward call of the session (Session::eval).
  void begin_call(int64_t n_tok);
  Status end_call();

  const std::vector<float>& thresholds() const { return thr_; }  // current, per layer
  const DynamicOptions& options() const { return opt_; }
  const DynamicTotals& totals() const { return totals_; }
  const std::vector<DynamicTracePoint>& trace() const { return trace_; }
  const sparse::FiringCounters& counters() const { return counters_; }
  // One line for logs.
  std::string summary() const;

 private:
  DynamicSparsity() = default;
  const LlamaModel* model_ = nullptr;
  const SparseFfn* sparse_ = nullptr;
  DeviceModel* dm_ = nullptr;
  DynamicOptions opt_;
  bool predictor_ = false;
  bool moe_ = false;         // placement by experts (a mixture-of-experts model)
  bool free_audit_ = false;  // host-only thresholds: every call observed (no extra gate work)
  sparse::FiringCounters counters_;
  sparse::ThresholdController ctl_;
  std::vector<float> thr_;      // what the forward pass reads (magnitude or predictor)
  bool audit_now_ = false;
  uint64_t calls_ = 0, tokens_ = 0;
  uint64_t since_migration_ = 0;  // audited tokens since the last round
  // This call's sums (trace).
  double call_fired_mass_ = 0, call_total_mass_ = 0, call_device_mass_ = 0;
  double call_fired_ = 0, call_seen_ = 0, call_device_fired_ = 0;
  bool call_observed_ = false;
  int64_t last_layer_tokens_ = 0;
  DynamicTotals totals_;
  std::vector<DynamicTracePoint> trace_;
  // Threshold (|a|) at which one token's activations meet the controller's target.
  float quantile_for_target(const float* act, int64_t n_ff);
  std::vector<uint8_t> cold_start_;  // [n_layer] control starts from the first token's quantile
  std::vector<float> sorted_;
  std::vector<int32_t> fired_idx_;
  std::vector<double> counts_;
};

}  // namespace hc
