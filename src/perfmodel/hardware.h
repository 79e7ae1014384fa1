// The hardware the projection runs on: the host's efficiencies (the engine's achieved over the
// read probe's bandwidth, measured here) and named machines (host, device, link, per-operation
// and round-trip costs; docs/SIMULATE.md "Hardware" cites each figure or marks it an assumption).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hc::perfmodel {

struct HostEfficiency {
  std::string type;    // weight type measured ("q8_0"), or "" for the built-in table
  double dense = 0;    // engine dense decode GB/s / read probe GB/s
  // (firing share, sparse-row kernels' GB/s / dense decode GB/s), ascending share.
  std::vector<std::pair<double, double>> sparse_rel;
  // A hybrid layer's cold gate rows read in order by the row kernel (sparse_rows), GB/s over
  // the dense decode's; 0: sparse_at(1).
  double gate_rows_rel = 0;
  std::string source;
  // Upper bounds validate() holds the figures to. Physical only relative to what the same run
  // measured: the engine cannot read its weights faster than a plain read of a buffer that size
  // (dense_max: that read's GB/s over the DRAM probe's; rel_max: a read of an L1-sized buffer,
  // the fastest any row kernel can read, over the dense decode's GB/s), with room for timing
  // noise. A model that sits in cache is legitimately above 1. The defaults guard typed-in
  // figures and the built-in table (models far larger than the cache).
  double dense_max = 2.0;
  double rel_max = 4.0;
  // Piecewise-linear in the firing share, clamped at the ends; 1 when the table is empty.
  double sparse_at(double share) const;
  double gate_rows() const { return gate_rows_rel > 0 ? gate_rows_rel : sparse_at(1.0); }
  Status validate() const;
};
// From docs/BENCHMARKS.md's measurements on this machine (7B-shaped files, 2 threads): dense
// decode roofline shares and hc-ffn-bench sparse / dense FFN GB/s at 50/80/90/95% sparsity.
// Types without a measurement take the nearest measured one (the source says which).
HostEfficiency builtin_host_efficiency(GgmlType t);

struct HardwareSpec {
  std::string key;          // "rtx4090", "a100-80g", "a100-40g", "host"
  std::string description;
  // Host.
  double host_peak_gbps = 0;      // memory bandwidth (spec), or the measured probe for "host"
  double host_read_fraction = 1;  // STREAM-like read / peak (1 for a measured probe)
  int host_cores = 0;
  // Device.
  bool has_device = true;
  uint64_t dev_mem_bytes = 0;       // 0: no limit of its own (the CPU device)
  uint64_t dev_reserve_bytes = 0;   // CUDA context, workspaces: not for weights
  double dev_peak_gbps = 0;         // memory bandwidth (spec) or measured
  double dev_eff = 1;               // achieved / peak for decode-sized matrix-vector work
  double link_gbps = 0;             // host <-> device, effective
  double op_us = 0;                 // one queued device operation
  double sync_us = 0;               // one host/device round trip
  uint64_t dev_overhead_bytes = 0;  // charged at open (beyond the reserve)
  uint64_t dev_fixed_bytes = 0;     // the executor's device scratch
  // Host and device halves of a hybrid layer run at the same time (a GPU). False for a CPU
  // device whose threads share the host's cores: the halves then take the sum, not the max.
  bool overlap = true;
  // Extra seconds (in us) per weight-streaming operation and per copy: a CPU device paced to a
  // bandwidth (--device-emulate-gbps) sleeps, and each sleep overshoots. 0 otherwise.
  double paced_op_us = 0;
  // Extra us per layer whose FFN is split between host and device (some of its neurons there, the
  // rest here): the coordination the planner's cost model does not count (the host's threads woken
  // per layer, the halves' events and merge). 0 unless fitted to a measured run (h100-sxm).
  double hybrid_layer_us = 0;
  std::string source;

  double host_read_gbps() const { return host_peak_gbps * host_read_fraction; }
  double dev_gbps() const { return dev_peak_gbps * dev_eff; }
  // Memory minus the reserve; for a device without a limit, UINT64_MAX / 4.
  uint64_t default_budget() const;
  Status validate() const;
};

// Fitted to the H100 run of 2026-11-26 by bench/calibrate_simulate_gpu.py (docs/SIMULATE.md,
// "Calibrated on a GPU"): one queued operation and one round trip (dense offload, -ngl 1/3/7),
// the lent host's read GB/s (host-only decode), a split layer's extra (hot/cold split at four
// budgets).
constexpr double kH100OpUs = 4.0;
constexpr double kH100SyncUs = 160.0;
// The host: the fitted achieved 86.6 GB/s over the built-in Q4_0 dense efficiency (0.851), so
// that the catalog entry with the built-in efficiencies reproduces it.
constexpr double kH100HostGbps = 86.6 / 0.851;
constexpr double kH100HybridLayerUs = 850.0;

// rtx4090, a100-80g, a100-40g, h100-sxm (docs/SIMULATE.md cites each figure or marks it an
// assumption).
const std::vector<HardwareSpec>& hardware_catalog();
// By key ("rtx4090-pcie4-ddr5", "a100-80g-pcie", "a100" are accepted too); errors name the
// accepted keys.
Result<HardwareSpec> find_hardware(const std::string& key);

}  // namespace hc::perfmodel
