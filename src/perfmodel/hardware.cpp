// Host efficiencies and the hardware catalog (perfmodel/hardware.h; docs/SIMULATE.md cites each
// figure or marks it an assumption).
#include "perfmodel/hardware.h"

#include <algorithm>
#include <cmath>

#include "perfmodel/detail.h"
#include "perfmodel/model_bytes.h"

namespace hc::perfmodel {

using detail::fmt;
using detail::finite_pos;
using detail::kGB;
using detail::kGiB;

double HostEfficiency::sparse_at(double share) const {
  if (sparse_rel.empty()) return 1.0;
  if (share <= sparse_rel.front().first) return sparse_rel.front().second;
  if (share >= sparse_rel.back().first) return sparse_rel.back().second;
  for (size_t i = 1; i < sparse_rel.size(); ++i) {
    const auto [x1, y1] = sparse_rel[i];
    if (share <= x1) {
      const auto [x0, y0] = sparse_rel[i - 1];
      return x1 > x0 ? y0 + (y1 - y0) * (share - x0) / (x1 - x0) : y1;
    }
  }
  return sparse_rel.back().second;
}

Status HostEfficiency::validate() const {
  if (!finite_pos(dense_max) || !finite_pos(rel_max))
    return Status::Error("host efficiency: expected positive bounds, found dense_max " +
                         fmt(dense_max) + ", rel_max " + fmt(rel_max));
  if (!(gate_rows_rel >= 0 && gate_rows_rel <= rel_max))
    return Status::Error("host efficiency: expected a gate-rows ratio in [0, " + fmt(rel_max) +
                         "], found " + fmt(gate_rows_rel));
  if (!finite_pos(dense) || dense > dense_max)
    return Status::Error("host efficiency: expected a dense decode efficiency in (0, " +
                         fmt(dense_max) + "], found " + fmt(dense));
  for (size_t i = 0; i < sparse_rel.size(); ++i) {
    const auto [s, r] = sparse_rel[i];
    if (!(s > 0 && s <= 1) || !finite_pos(r) || r > rel_max)
      return Status::Error("host efficiency: point " + std::to_string(i) + " is (" + fmt(s) +
                           ", " + fmt(r) + "), expected a firing share in (0, 1] and a ratio in "
                           "(0, " + fmt(rel_max) + "]");
    if (i > 0 && !(s > sparse_rel[i - 1].first))
      return Status::Error("host efficiency: firing shares must ascend, found " +
                           fmt(sparse_rel[i - 1].first) + " then " + fmt(s));
  }
  return Status::Ok();
}

HostEfficiency builtin_host_efficiency(GgmlType t) {
  // docs/BENCHMARKS.md, this machine, 2 threads, 7B shape (n_embd 4096, n_ff 11008):
  //   dense: decode roofline share of the 7B-shaped files (Q4_0 85.1%, Q8_0 86.9%, Q4_K 79.0%);
  //          F16: 16.1 tok/s x 1.88 GB = 30.3 GB/s against the 34.9-35.8 GB/s probe = 0.856.
  //   sparse: hc-ffn-bench ffn_sparse (gate, up, down_t over a uniform random firing set) against
  //          ffn_dense, microseconds per token at 50 / 80 / 90 / 95% sparsity; GB/s from the
  //          bytes each reads (down_t is Q8_0 for block types).
  struct Row {
    GgmlType type;
    double dense_share;
    double dense_us;
    double sparse_us[4];  // sparsity 50, 80, 90, 95%
  };
  static const Row kRows[] = {
      {GgmlType::F16, 0.856, 9378, {4935, 1895, 1069, 501}},
      {GgmlType::Q8_0, 0.869, 4845, {4165, 1657, 785, 383}},
      {GgmlType::Q4_0, 0.851, 3080, {3988, 1234, 692, 323}},
      {GgmlType::Q4_K, 0.790, 2907, {3201, 1429, 585, 287}},
  };
  // Nearest measured type: by bytes per weight (F32/BF16 -> F16, Q5/Q6 -> Q8_0, 4-bit ->
  // Q4_0/Q4_K).
  const Row* row = &kRows[2];
  const char* note = "";
  switch (t) {
    case GgmlType::F16: row = &kRows[0]; break;
    case GgmlType::Q8_0: row = &kRows[1]; break;
    case GgmlType::Q4_0: row = &kRows[2]; break;
    case GgmlType::Q4_K: row = &kRows[3]; break;
    case GgmlType::F32:
    case GgmlType::BF16:
      row = &kRows[0];
      note = " (nearest measured: F16)";
      break;
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q6_K: case GgmlType::Q8_1:
      row = &kRows[1]; note = " (nearest measured: Q8_0)"; break;
    case GgmlType::Q5_K: case GgmlType::Q3_K: case GgmlType::Q2_K:
      row = &kRows[3]; note = " (nearest measured: Q4_K)"; break;
    default: row = &kRows[2]; note = " (nearest measured: Q4_0)"; break;
  }
  const int64_t n_embd = 4096, n_ff = 11008;
  const GgmlType rt = row->type, dt = down_t_type_of(rt);
  const double dense_bytes = 2.0 * n_ff * static_cast<double>(row_bytes(rt, n_embd)) +
                             static_cast<double>(n_embd) * static_cast<double>(row_bytes(rt, n_ff));
  const double neuron = 2.0 * static_cast<double>(row_bytes(rt, n_embd)) +
                        static_cast<double>(row_bytes(dt, n_embd));
  const double dense_gbps = dense_bytes / (row->dense_us * 1e-6) / kGB;
  HostEfficiency e;
  e.dense = row->dense_share;
  const double firing[4] = {0.05, 0.10, 0.20, 0.50};
  for (int i = 0; i < 4; ++i) {
    const double us = row->sparse_us[3 - i];
    const double gbps = firing[i] * n_ff * neuron / (us * 1e-6) / kGB;
    e.sparse_rel.emplace_back(firing[i], gbps / dense_gbps);
  }
  // Every row in order (the cold gate of a hybrid layer): "the per-row kernels stream at 15-22
  // GB/s on two threads even over all rows in order, against 25-30 GB/s for the decode layout's
  // 16-row kernels" (midpoints: 18.5 / 27.5), or the 50% point when that is higher (F16).
  e.sparse_rel.emplace_back(1.0, std::max(18.5 / 27.5, e.sparse_rel.back().second));
  e.source = std::string("built-in (docs/BENCHMARKS.md, ") + dtype_name(rt) + " on this machine)" +
             note;
  return e;
}

uint64_t HardwareSpec::default_budget() const {
  if (!has_device) return 0;
  if (dev_mem_bytes == 0) return std::numeric_limits<uint64_t>::max() / 4;
  return dev_mem_bytes > dev_reserve_bytes ? dev_mem_bytes - dev_reserve_bytes : 0;
}

Status HardwareSpec::validate() const {
  const std::string where = "hardware '" + key + "': ";
  if (!finite_pos(host_peak_gbps))
    return Status::Error(where + "expected a host bandwidth > 0 GB/s, found " +
                         fmt(host_peak_gbps));
  if (!(host_read_fraction > 0 && host_read_fraction <= 1))
    return Status::Error(where + "expected a host read fraction in (0, 1], found " +
                         fmt(host_read_fraction));
  if (!has_device) return Status::Ok();
  if (!finite_pos(dev_peak_gbps) || !finite_pos(link_gbps))
    return Status::Error(where + "expected device and link bandwidths > 0 GB/s, found " +
                         fmt(dev_peak_gbps) + " and " + fmt(link_gbps));
  if (!(dev_eff > 0 && dev_eff <= 1))
    return Status::Error(where + "expected a device efficiency in (0, 1], found " + fmt(dev_eff));
  if (!(op_us >= 0 && std::isfinite(op_us)) || !(sync_us >= 0 && std::isfinite(sync_us)))
    return Status::Error(where + "expected op and sync costs >= 0 us, found " + fmt(op_us) +
                         " and " + fmt(sync_us));
  if (!(hybrid_layer_us >= 0 && std::isfinite(hybrid_layer_us)))
    return Status::Error(where + "expected a split layer's extra cost >= 0 us, found " +
                         fmt(hybrid_layer_us));
  return Status::Ok();
}

namespace {

// The GPU machine lent on 2026-11-26 (docs/BENCHMARKS.md): its device costs and host bandwidth
// fitted to that run's decode figures by bench/calibrate_simulate_gpu.py (docs/SIMULATE.md,
// "Calibrated on a GPU"), the memory and bandwidth from the datasheet.
HardwareSpec h100_lent() {
  HardwareSpec h;
  h.key = "h100-sxm";
  h.description = "H100 SXM5 80 GB HBM3 (3352 GB/s), PCIe 5.0 x16, 16 host cores (lent 2026-11-26)";
  h.host_peak_gbps = kH100HostGbps;
  h.host_read_fraction = 1;  // the fit is of an achieved rate (kH100HostGbps)
  h.host_cores = 16;
  h.dev_mem_bytes = 80 * kGiB;
  h.dev_reserve_bytes = 0;  // the overhead below is charged inside the budget
  h.dev_overhead_bytes = uint64_t{688} << 20;  // measured: CUDA context + cuBLAS
  h.dev_peak_gbps = 3352;
  h.dev_eff = 0.66;  // held at the RTX 4090's (the fit cannot separate it from op_us)
  h.link_gbps = 50;  // assumption: ~80% of PCIe 5.0 x16's 63 GB/s per direction
  h.op_us = kH100OpUs;
  h.sync_us = kH100SyncUs;
  h.hybrid_layer_us = kH100HybridLayerUs;
  h.source = "NVIDIA H100 datasheet (SXM5 80GB: 3.35 TB/s); op_us, sync_us and the host's read "
             "fitted to docs/BENCHMARKS.md 2026-11-26 (bench/calibrate_simulate_gpu.py)";
  return h;
}

}  // namespace

const std::vector<HardwareSpec>& hardware_catalog() {
  // Sources and assumptions: docs/SIMULATE.md, "Hardware catalog".
  auto gpu = [](std::string key, std::string desc, uint64_t mem, double gbps, double host_gbps,
                int cores, std::string source) {
    HardwareSpec h;
    h.key = std::move(key);
    h.description = std::move(desc);
    h.host_peak_gbps = host_gbps;
    h.host_read_fraction = 0.9;  // AIDA64 read / theoretical, dual-channel DDR4 (guru3d)
    h.host_cores = cores;
    h.has_device = true;
    h.dev_mem_bytes = mem;
    h.dev_reserve_bytes = kGiB;  // assumption: CUDA context, cuBLAS workspace, scratch
    h.dev_peak_gbps = gbps;
    h.dev_eff = 0.66;  // llama.cpp tg128 on an RTX 4090: 66.3% of 1008 GB/s (r/LocalLLaMA)
    h.link_gbps = 25;  // assumption: ~80% of PCIe 4.0 x16's 31.5 GB/s per direction
    h.op_us = 1;       // assumption: asynchronous launches overlap the GPU's work
    h.sync_us = 10;    // assumption: copy in, kernel, copy out, stream sync
    h.source = std::move(source);
    return h;
  };
  static const std::vector<HardwareSpec> kHw = {
      gpu("rtx4090", "RTX 4090 24 GiB (1008 GB/s), PCIe 4.0 x16, i9-13900K + DDR5 67.2 GB/s",
          24 * kGiB, 1008, 67.2, 8,
          "NVIDIA RTX 4090 spec (384-bit GDDR6X at 21 Gbps = 1008 GB/s); host: PowerInfer's "
          "PC-High (Song et al., SOSP '24, section 8.1)"),
      gpu("a100-80g", "A100 80GB PCIe (1935 GB/s), PCIe 4.0 x16, 8-channel DDR4-3200 host",
          80 * kGiB, 1935, 204.8, 64,
          "NVIDIA A100 datasheet (80GB PCIe: 1,935 GB/s); host: assumption (one EPYC socket, "
          "8 x DDR4-3200 = 204.8 GB/s)"),
      gpu("a100-40g", "A100 40GB PCIe (1555 GB/s), PCIe 4.0 x16, 8-channel DDR4-3200 host",
          40 * kGiB, 1555, 204.8, 64,
          "NVIDIA A100 datasheet (40GB PCIe: 1,555 GB/s); host: assumption as a100-80g"),
      h100_lent(),
  };
  return kHw;
}

Result<HardwareSpec> find_hardware(const std::string& key) {
  std::string k = key;
  if (k == "rtx4090-pcie4-ddr5" || k == "4090") k = "rtx4090";
  if (k == "a100-80g-pcie" || k == "a100" || k == "a100-80gb") k = "a100-80g";
  if (k == "a100-40g-pcie" || k == "a100-40gb") k = "a100-40g";
  if (k == "h100" || k == "h100-80g" || k == "h100-sxm5") k = "h100-sxm";
  std::string keys;
  for (const HardwareSpec& h : hardware_catalog()) {
    if (h.key == k) return h;
    keys += h.key + ", ";
  }
  return Status::Error("unknown hardware '" + key + "': expected one of " + keys +
                       "host (this machine, from --calibration) or all");
}

}  // namespace hc::perfmodel
