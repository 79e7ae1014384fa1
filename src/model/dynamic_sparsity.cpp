#include "model/dynamic_sparsity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace hc {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<DynamicSparsity>> DynamicSparsity::create(const LlamaModel& model,
                                                                  const SparseFfn* sparse,
                                                                  DeviceModel* dm,
                                                                  const DynamicOptions& opt) {
  const LlamaHParams& hp = model.hparams();
  if (!sparse && !hp.is_moe())
    return Status::Error("dynamic sparsity needs a sparse FFN (or a mixture-of-experts model)");
  if (hp.is_moe() && opt.control)
    return Status::Error("dynamic sparsity: this " + hp.arch + " model routes experts; its "
                         "router, not a threshold, decides what runs (no --dynamic; --migrate "
                         "moves experts)");
  if (opt.audit_every < 1)
    return Status::Error("dynamic sparsity: audit_every must be >= 1, found " +
                         std::to_string(opt.audit_every));
  if (opt.migrate_every < 1)
    return Status::Error("dynamic sparsity: migrate_every must be >= 1, found " +
                         std::to_string(opt.migrate_every));
  if (!(opt.half_life > 0) || !std::isfinite(opt.half_life))
    return Status::Error("dynamic sparsity: the counters' half-life must be > 0 tokens");
  if (opt.trace_every < 0)
    return Status::Error("dynamic sparsity: trace_every must be >= 0");
  if (dm && &dm->model() != &model)
    return Status::Error("dynamic sparsity: the device model belongs to another model");
  bool hybrid = false;  // migration keeps every layer's capacity, so this never changes
  for (int il = 0; dm && il < hp.n_layer; ++il)
    hybrid |= hp.is_moe() ? dm->layer(il).moe() : dm->layer(il).hybrid();
  if (opt.migrate) {
    if (!hybrid)
      return Status::Error(hp.is_moe()
                               ? "dynamic placement of experts needs experts on a device (a plan, "
                                 "--vram-budget or -ngl), but no layer has any"
                               : "dynamic placement needs hot neurons on a device (a plan or "
                                 "--vram-budget with --stats), but no layer has any");
  }
  std::unique_ptr<DynamicSparsity> d(new DynamicSparsity());
  d->model_ = &model;
  d->sparse_ = sparse;
  d->dm_ = dm;
  d->opt_ = opt;
  if (hp.is_moe()) {  // experts: every routing is observed, nothing to control
    d->moe_ = true;
    d->free_audit_ = true;
    d->counters_ = sparse::FiringCounters(hp.n_layer, hp.n_expert, opt.half_life);
    return d;
  }
  d->predictor_ = sparse->use_predictor();
  d->free_audit_ = !d->predictor_ && !hybrid;
  d->thr_.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il)
    d->thr_[static_cast<size_t>(il)] =
        d->predictor_ ? sparse->predictor_threshold(il) : sparse->threshold(il);
  d->counters_ = sparse::FiringCounters(hp.n_layer, hp.n_ff, opt.half_life);
  if (opt.control) {
    sparse::ControllerParams cp = opt.controller;
    cp.log_domain = !d->predictor_;
    if (d->predictor_) {  // logits: any sign
      cp.t_min = -1e6f;
      cp.t_max = 1e6f;
    }
    HC_TRY(cp.validate());
    d->ctl_ = sparse::ThresholdController(d->thr_, cp);
    for (int il = 0; il < hp.n_layer; ++il)  // magnitude thresholds at 0: no calibration
      d->cold_start_.push_back(!d->predictor_ && d->thr_[static_cast<size_t>(il)] <= 0.0f);
    d->thr_ = d->ctl_.thresholds();  // clamped into the controller's range
  }
  return d;
}

Status DynamicSparsity::seed(const ActStats& stats) {
  const LlamaHParams& hp = model_->hparams();
  if (moe_) HC_TRY(stats.check_matches(hp).with_context("dynamic sparsity"));
  const int64_t n = moe_ ? hp.n_expert : hp.n_ff;  // counted units per layer
  if (!moe_ && (stats.n_layer() != hp.n_layer || stats.n_ff() != hp.n_ff))
    return Status::Error("dynamic sparsity: statistics of " + std::to_string(stats.n_layer()) +
                         " layers x " + std::to_string(stats.n_ff()) +
                         " neurons cannot seed a model of " + std::to_string(hp.n_layer) +
                         " x " + std::to_string(hp.n_ff));
  if (stats.n_tokens() == 0) return Status::Error("dynamic sparsity: the statistics count no tokens");
  std::vector<double> p(static_cast<size_t>(n));
  for (int il = 0; il < hp.n_layer; ++il) {
    const std::vector<float>& c = moe_ ? stats.expert_count(il) : stats.fire_count(il);
    for (int64_t i = 0; i < n; ++i)
      p[static_cast<size_t>(i)] = static_cast<double>(c[static_cast<size_t>(i)]) /
                                  static_cast<double>(stats.n_tokens());
    counters_.seed(il, p, opt_.half_life);
  }
  return Status::Ok();
}

void DynamicSparsity::attach(SparseScratch& sc) {
  if (moe_) return;
  sc.monitor = this;
  if (predictor_) sc.predictor_thresholds = thr_.data();
  else sc.thresholds = thr_.data();
}

void DynamicSparsity::attach(MoeScratch& sc) {
  if (moe_) sc.monitor = this;
}

void DynamicSparsity::on_routing(int il, const MoeRouting& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceLayer* dl = dm_ && dm_->layer(il).moe() ? &dm_->layer(il) : nullptr;
  const int n_expert = model_->hparams().n_expert;
  for (int64_t t = 0; t < r.n_tok; ++t) {
    const int32_t* ex = r.expert.data() + t * r.k;
    const float* w = r.weight.data() + t * r.k;
    counters_.add_token(il, ex, r.k);
    for (int j = 0; j < r.k; ++j) {
      const bool on_dev = dl && dl->slot_of[static_cast<size_t>(ex[j])] >= 0;
      call_fired_mass_ += w[j];
      call_device_mass_ += on_dev ? w[j] : 0.0;
      call_device_fired_ += on_dev ? 1.0 : 0.0;
    }
    call_fired_ += r.k;
    call_seen_ += n_expert;
  }
  call_total_mass_ = call_fired_mass_;  // every routed expert runs: recall 1
  call_observed_ = true;
  totals_.observe_seconds += seconds_since(t0);
}

void DynamicSparsity::begin_call(int64_t n_tok) {
  // Host-only thresholds: act(gate) of every neuron is computed anyway, so every call is watched.
  audit_now_ = free_audit_ || calls_ % static_cast<uint64_t>(opt_.audit_every) == 0;
  last_layer_tokens_ = n_tok;
  call_fired_mass_ = call_total_mass_ = call_device_mass_ = 0;
  call_fired_ = call_seen_ = call_device_fired_ = 0;
  call_observed_ = false;
}

void DynamicSparsity::observe(int il, const float* act, const uint8_t* fire, int64_t n_tok,
                              int64_t n_ff) {
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceLayer* dl = dm_ && dm_->layer(il).hybrid() ? &dm_->layer(il) : nullptr;
  fired_idx_.resize(static_cast<size_t>(n_ff));
  double b_fm = 0, b_tm = 0, b_nf = 0;  // this call's sums (the controller's measurement)
  bool started = false;
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* a = act + t * n_ff;
    const uint8_t* f = fire + t * n_ff;
    double fm = 0, tm = 0, dmass = 0;
    int64_t nf = 0, ndev = 0;
    for (int64_t i = 0; i < n_ff; ++i) {
      const double m = std::fabs(a[i]);
      tm += m;
      if (f[i]) {
        fm += m;
        fired_idx_[static_cast<size_t>(nf++)] = static_cast<int32_t>(i);
      }
    }
    if (dl) {
      for (int64_t j = 0; j < nf; ++j) {
        const int32_t i = fired_idx_[static_cast<size_t>(j)];
        if (dl->local[static_cast<size_t>(i)] >= 0) {
          dmass += std::fabs(a[i]);
          ++ndev;
        }
      }
    }
    counters_.add_token(il, fired_idx_.data(), nf);
    if (opt_.control && t == 0 && cold_start_[static_cast<size_t>(il)]) {
      // The layer started from threshold 0 (exact ReLU or uncalibrated): the first token's own
      // quantile for the target is a far better start than the controller's floor, which it
      // would need hundreds of bounded steps to climb from.
      cold_start_[static_cast<size_t>(il)] = 0;
      started = true;
      ctl_.reset(il, quantile_for_target(a, n_ff));
      thr_[static_cast<size_t>(il)] = ctl_.threshold(il);
    }
    b_fm += fm;
    b_tm += tm;
    b_nf += static_cast<double>(nf);
    call_fired_mass_ += fm;
    call_total_mass_ += tm;
    call_device_mass_ += dmass;
    call_fired_ += static_cast<double>(nf);
    call_seen_ += static_cast<double>(n_ff);
    call_device_fired_ += static_cast<double>(ndev);
  }
  // One controller step per layer call: every token of the call was decided with the same
  // threshold, so per-token steps would integrate one stale error n_tok times (a 512-token prompt
  // chunk would swing the threshold by up to 512 max_steps). Per-token means keep one scale.
  if (opt_.control && !started && n_tok > 0) {
    const double n = static_cast<double>(n_tok);
    thr_[static_cast<size_t>(il)] =
        ctl_.update(il, b_fm / n, b_tm / n, b_nf / n, static_cast<double>(n_ff));
  }
  call_observed_ = true;
  totals_.observe_seconds += seconds_since(t0);
}

float DynamicSparsity::quantile_for_target(const float* act, int64_t n_ff) {
  sorted_.resize(static_cast<size_t>(n_ff));
  double total = 0;
  for (int64_t i = 0; i < n_ff; ++i) total += sorted_[static_cast<size_t>(i)] = std::fabs(act[i]);
  std::sort(sorted_.begin(), sorted_.end());
  const double v = opt_.controller.target_value;
  if (opt_.controller.target == sparse::ControllerParams::Target::kSparsity) {
    const size_t k = std::min(sorted_.size() - 1, static_cast<size_t>(v * static_cast<double>(n_ff)));
    return sorted_.empty() ? 0.0f : sorted_[k];
  }
  // Recall: the largest |a| whose smaller values together hold at most 1 - v of the mass.
  double below = 0;
  float t = 0;
  for (float x : sorted_) {
    if (below + x > (1.0 - v) * total) break;
    below += x;
    t = x;
  }
  return t;
}

Status DynamicSparsity::end_call() {
  const int64_t n_tok = last_layer_tokens_;
  ++calls_;
  tokens_ += static_cast<uint64_t>(n_tok);
  audit_now_ = false;
  if (!call_observed_) return Status::Ok();
  const int n_layer = model_->hparams().n_layer;
  totals_.audited_tokens += static_cast<uint64_t>(n_tok);
  totals_.fired_mass += call_fired_mass_;
  totals_.total_mass += call_total_mass_;
  totals_.device_mass += call_device_mass_;
  totals_.fired += call_fired_;
  totals_.seen += call_seen_;
  totals_.device_fired += call_device_fired_;
  since_migration_ += static_cast<uint64_t>(n_tok);
  if (opt_.migrate && since_migration_ >= static_cast<uint64_t>(opt_.migrate_every)) {
    const auto t0 = std::chrono::steady_clock::now();
    since_migration_ = 0;
    ++totals_.migration_rounds;
    for (int il = 0; il < n_layer; ++il) {
      const DeviceLayer& dl = dm_->layer(il);
      if (moe_ ? !dl.moe() : !dl.hybrid()) continue;
      counters_.counts(il, &counts_);
      const std::vector<sparse::Swap> swaps =
          sparse::plan_swaps(moe_ ? dl.expert_of : dl.hot, counts_.data(),
                             static_cast<int64_t>(counts_.size()), opt_.migration);
      if (swaps.empty()) continue;
      HC_TRY(moe_ ? dm_->migrate_experts(il, swaps) : dm_->migrate(il, swaps));
      totals_.swaps += swaps.size();
    }
    totals_.migrated_bytes = dm_->migrated_bytes();
    totals_.migrate_seconds += seconds_since(t0);
  }
  if (opt_.trace_every > 0 && (calls_ - 1) % static_cast<uint64_t>(opt_.trace_every) == 0) {
    DynamicTracePoint p;
    p.tokens = tokens_;
    const bool dev = dm_ != nullptr && (dm_->n_hot_neurons() > 0 || dm_->n_experts() > 0);
    p.device_mass = dev && call_fired_mass_ > 0 ? call_device_mass_ / call_fired_mass_ : -1;
    p.device_fired = dev && call_fired_ > 0 ? call_device_fired_ / call_fired_ : -1;
    p.recall = call_total_mass_ > 0 ? call_fired_mass_ / call_total_mass_ : 0;
    p.sparsity = call_seen_ > 0 ? 1.0 - call_fired_ / call_seen_ : 0;
    double s = 0;
    for (float t : thr_) s += t;
    p.mean_threshold = thr_.empty() ? 0 : s / static_cast<double>(thr_.size());
    p.migrated = totals_.swaps;
    trace_.push_back(p);
  }
  return Status::Ok();
}

std::string DynamicSparsity::summary() const {
  char buf[320];
  double s = 0;
  for (float t : thr_) s += t;
  std::snprintf(buf, sizeof buf,
                "dynamic sparsity: %llu audited tokens, recall %.4f, sparsity %.3f, device mass "
                "%.3f, mean threshold %.4g, %llu swaps in %llu rounds (%.1f MiB), observe %.3f s, "
                "migrate %.3f s",
                static_cast<unsigned long long>(totals_.audited_tokens), totals_.recall(),
                totals_.sparsity(), totals_.device_mass_share(),
                thr_.empty() ? 0.0 : s / static_cast<double>(thr_.size()),
                static_cast<unsigned long long>(totals_.swaps),
                static_cast<unsigned long long>(totals_.migration_rounds),
                static_cast<double>(totals_.migrated_bytes) / (1024.0 * 1024.0),
                totals_.observe_seconds, totals_.migrate_seconds);
  return buf;
}

}  // namespace hc
