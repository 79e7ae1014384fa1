// hotcold simulate: projected decode tokens/s of LLaMA-shaped and MoE models on named hardware
// for dense layer offload, llama.cpp's experts-on-CPU split, static and dynamic hot/cold
// placement of neurons or whole experts (sparse/simulate.h, docs/SIMULATE.md).
// --calibrate measures this machine instead (read probe, the engine's dense decode and sparse
// row kernels on a model, the CPU device's bandwidth and per-operation costs) and writes the
// JSON that --calibration reads back (--hw host projects this machine itself).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "app/plan_input.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/act_stats.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/sparse.h"
#include "ops/device.h"
#include "sparse/placement_plan.h"
#include "sparse/simulate.h"

namespace hc {
namespace {

using json = nlohmann::json;
constexpr char kCmd[] = "simulate";
constexpr double kGiBd = 1073741824.0;

struct SimFlags {
  std::string shape;   // "" = llama2-7b unless -m names a file
  std::string hw = "rtx4090";
  std::string type;    // "" = q4_0
  std::string stats, calibration, plan, out, model, solver = "greedy";
  float sparsity = -1;  // < 0: not given (power law: 0.9; MoE: the shape's expert sparsity)
  float expert_skew = static_cast<float>(sparse::kDefaultExpertSkew);
  int expert_pred_rank = -1;  // < 0: the shape's
  int n_cpu_moe = -1;
  float cover = static_cast<float>(sparse::kReluLlamaCoverShare);
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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// ---- calibration --------------------------------------------------------------------------

struct Calibration {
  std::string path, model, date;
  int threads = 0;
  int cores = 0;              // hardware threads of the machine
  double read_gbps = 0;       // membw read probe, best pass
  sparse::HostEfficiency eff;
  bool has_device = false;
  int device_threads = 0;
  double dev_dense_gbps = 0;  // the CPU device's matmul GB/s
  double dev_mem_gbps = 0;    // its membw probe
  double link_gbps = 0, op_us = 0, sync_us = 0;
  double sleep_overshoot_us = 0;  // a paced CPU device's extra per sleep
  uint64_t dev_overhead_bytes = 0, dev_fixed_bytes = 0;
};

Result<double> number_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number())
    return Status::Error(where + ": expected a number at \"" + key + "\", found " +
                         (j.contains(key) ? j[key].dump() : std::string("nothing")));
  return j[key].get<double>();
}

Result<Calibration> read_calibration(const std::string& path) {
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string where = "calibration '" + path + "'";
  if (j.is_discarded() || !j.is_object())
    return Status::Error(where + ": expected a JSON object (from hotcold simulate --calibrate)");
  if (!j.contains("version") || j["version"] != 1)
    return Status::Error(where + ": expected \"version\": 1, found " +
                         (j.contains("version") ? j["version"].dump() : std::string("none")));
  Calibration c;
  c.path = path;
  c.model = j.value("model", "");
  c.date = j.value("date", "");
  c.threads = j.value("threads", 0);
  if (!j.contains("host") || !j["host"].is_object())
    return Status::Error(where + ": expected an object at \"host\"");
  HC_ASSIGN_OR_RETURN(c.read_gbps, number_at(j["host"], "read_gbps", where + " host"));
  c.cores = j["host"].value("cores", 0);
  if (!j.contains("efficiency") || !j["efficiency"].is_object())
    return Status::Error(where + ": expected an object at \"efficiency\"");
  const json& e = j["efficiency"];
  c.eff.type = lower(e.value("type", ""));
  HC_ASSIGN_OR_RETURN(c.eff.dense, number_at(e, "dense", where + " efficiency"));
  if (!e.contains("sparse_rel") || !e["sparse_rel"].is_array())
    return Status::Error(where + ": expected an array at \"efficiency.sparse_rel\"");
  for (const json& pt : e["sparse_rel"]) {
    if (!pt.is_array() || pt.size() < 2 || !pt[0].is_number() || !pt[1].is_number())
      return Status::Error(where + ": expected [firing share, ratio, ...] points in "
                           "\"efficiency.sparse_rel\", found " + pt.dump());
    c.eff.sparse_rel.emplace_back(pt[0].get<double>(), pt[1].get<double>());
  }
  c.eff.gate_rows_rel = e.value("gate_rows_rel", 0.0);
  // Bounds measured with the figures (files written before them: the built-in defaults).
  c.eff.dense_max = e.value("dense_max", c.eff.dense_max);
  c.eff.rel_max = e.value("rel_max", c.eff.rel_max);
  c.eff.source = "calibration " + path + " (" + c.eff.type + ")";
  HC_TRY(c.eff.validate().with_context(where));
  if (c.read_gbps <= 0)
    return Status::Error(where + ": expected host.read_gbps > 0, found " + fmt("%g", c.read_gbps));
  if (j.contains("cpu_device") && j["cpu_device"].is_object()) {
    const json& d = j["cpu_device"];
    c.has_device = true;
    c.device_threads = d.value("threads", 0);
    HC_ASSIGN_OR_RETURN(c.dev_dense_gbps, number_at(d, "dense_gbps", where + " cpu_device"));
    c.dev_mem_gbps = d.value("mem_gbps", 0.0);
    HC_ASSIGN_OR_RETURN(c.link_gbps, number_at(d, "link_gbps", where + " cpu_device"));
    HC_ASSIGN_OR_RETURN(c.op_us, number_at(d, "op_us", where + " cpu_device"));
    HC_ASSIGN_OR_RETURN(c.sync_us, number_at(d, "sync_us", where + " cpu_device"));
    c.sleep_overshoot_us = d.value("sleep_overshoot_us", 0.0);
    c.dev_overhead_bytes = d.value("overhead_bytes", uint64_t{0});
    c.dev_fixed_bytes = d.value("fixed_bytes", uint64_t{0});
  }
  return c;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&t));
  return buf;
}

// The read probe's best pass (STREAM's convention, as hotcold bench's roofline).
constexpr int64_t kProbeBytes = int64_t{256} << 20;  // the DRAM probe's array, >> any LLC here

// Best read GB/s over an array of `bytes` (the DRAM probe by default). A smaller array sits in
// cache: each timed pass then reads it enough times (about kProbeBytes in all, one dispatch) that
// the pool's wake-up does not count.
double best_read_gbps(int threads, int64_t bytes = kProbeBytes) {
  ThreadPool pool(threads);
  ops::MembwParams mp;
  mp.array_bytes = std::max<int64_t>(bytes, 4096);
  mp.reps = 10;
  mp.read_only = true;
  mp.read_passes = static_cast<int>(std::max<int64_t>(1, kProbeBytes / mp.array_bytes));
  auto r = ops::measure_membw(mp, pool);
  return r.ok() ? r->gbs_of(ops::MembwKernel::kRead) : 0.0;
}

// Dense decode tok/s of the model (one token at a time from an empty cache, best of reps).
Result<double> decode_tok_s(const std::shared_ptr<const LlamaModel>& model, int threads,
                            int n_tok) {
  SessionParams sp;
  sp.n_ctx = n_tok + 1;
  sp.n_threads = threads;
  Session s(model, sp);
  std::mt19937 rng(7);
  std::vector<int32_t> toks(static_cast<size_t>(n_tok));
  for (int32_t& t : toks) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(model->hparams().n_vocab));
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first pass warms the pages up and is not counted
    s.truncate(0);
    const double t0 = now_seconds();
    for (int i = 0; i < n_tok; ++i) HC_TRY(s.eval(std::span<const int32_t>(&toks[static_cast<size_t>(i)], 1)));
    const double v = n_tok / (now_seconds() - t0);
    if (rep > 0) best = std::max(best, v);
  }
  return best;
}

// The sparse FFN's row kernels over every layer, as decode runs them: up rows and down_t rows
// of a random ascending firing set of `share` of the neurons (1: all rows, in order). A fresh
// set per pass, and a 64 MiB read between passes (untimed), so the rows come from DRAM as in
// decode, where the rest of the model streams through the caches between two uses of a layer.
// GB/s of the best pass.
double sparse_rows_gbps(const LlamaModel& model, const SparseFfn& sp, double share, int threads) {
  const LlamaHParams& hp = model.hparams();
  ThreadPool pool(threads);
  std::mt19937 rng(11);
  const int64_t n_ff = hp.n_ff, n_embd = hp.n_embd;
  const auto n_idx = std::max<int64_t>(1, static_cast<int64_t>(std::llround(share * n_ff)));
  std::vector<std::vector<int32_t>> idx(static_cast<size_t>(hp.n_layer));
  std::vector<int32_t> all(static_cast<size_t>(n_ff));
  auto draw = [&] {
    for (auto& v : idx) {
      for (int64_t i = 0; i < n_ff; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      if (n_idx < n_ff) std::shuffle(all.begin(), all.end(), rng);
      v.assign(all.begin(), all.begin() + n_idx);
      std::sort(v.begin(), v.end());
    }
  };
  std::vector<float> x(static_cast<size_t>(n_embd)), y(static_cast<size_t>(n_idx)),
      out(static_cast<size_t>(n_embd));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  std::vector<float> flush(size_t{16} << 20, 1.0f);  // 64 MiB, past the last-level cache
  ops::MatmulInput in;
  double bytes = 0;
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
    bytes += static_cast<double>(n_idx) *
             (static_cast<double>(row_bytes(L.ffn_up.type, n_embd)) +
              static_cast<double>(row_bytes(sp.down_t(il).type, n_embd)));
  }
  const int reps = 12;
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {  // pass 0 is a warm-up
    draw();
    volatile double sink = ops::membw_read(flush.data(), static_cast<int64_t>(flush.size()), pool);
    (void)sink;
    const double t0 = now_seconds();
    for (int il = 0; il < hp.n_layer; ++il) {
      const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
      const std::vector<int32_t>& v = idx[static_cast<size_t>(il)];
      in.reset(x.data(), 1, n_embd);
      ops::sparse_rows(L.ffn_up, in, v.data(), n_idx, y.data(), pool);
      ops::sparse_down(sp.down_t(il), v.data(), n_idx, y.data(), 1, out.data(), pool);
    }
    const double dt = now_seconds() - t0;
    if (rep > 0) best = std::min(best, dt);
  }
  return bytes / best / 1e9;
}

// A hybrid layer's cold gate: sparse_rows over every gate row in order (the file's rows, as
// sparse_ffn_subset reads them), every layer, a 64 MiB read between passes. GB/s of the best.
double gate_rows_gbps(const LlamaModel& model, int threads) {
  const LlamaHParams& hp = model.hparams();
  ThreadPool pool(threads);
  std::vector<int32_t> all(static_cast<size_t>(hp.n_ff));
  for (int64_t i = 0; i < hp.n_ff; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<float> x(static_cast<size_t>(hp.n_embd), 0.01f), y(static_cast<size_t>(hp.n_ff));
  std::vector<float> flush(size_t{16} << 20, 1.0f);
  ops::MatmulInput in;
  double bytes = 0;
  for (int il = 0; il < hp.n_layer; ++il) {
    const TensorView& g = model.weights().layers[static_cast<size_t>(il)].ffn_gate;
    bytes += static_cast<double>(hp.n_ff) * static_cast<double>(row_bytes(g.type, g.ne0));
  }
  double best = 1e30;
  for (int rep = 0; rep <= 8; ++rep) {
    volatile double sink = ops::membw_read(flush.data(), static_cast<int64_t>(flush.size()), pool);
    (void)sink;
    const double t0 = now_seconds();
    for (int il = 0; il < hp.n_layer; ++il) {
      in.reset(x.data(), 1, hp.n_embd);
      ops::sparse_rows(model.weights().layers[static_cast<size_t>(il)].ffn_gate, in, all.data(),
                       hp.n_ff, y.data(), pool);
    }
    if (rep > 0) best = std::min(best, now_seconds() - t0);
  }
  return bytes / best / 1e9;
}

// The CPU device's dense matrix-vector GB/s over the model's matrices (>= 96 MiB of them when
// the model has that much), and its per-operation cost from a queue of tiny operations.
struct DeviceMeasure {
  double dense_gbps = 0, op_us = 0, sleep_overshoot_us = 0;
};
Result<DeviceMeasure> measure_device(ops::Device& dev, const LlamaModel& model) {
  DeviceMeasure m;
  const LlamaHParams& hp = model.hparams();
  HC_ASSIGN_OR_RETURN(void* scratch, dev.alloc(1024, "calibration scratch"));
  float* f = static_cast<float*>(scratch);
  // Round trips alone, then the same with 1000 tiny operations queued before each sync.
  auto time_syncs = [&](int ops_per_sync) -> Result<double> {
    const int n = 40;
    const double t0 = now_seconds();
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < ops_per_sync; ++k) dev.add(f, f + 16, 16);
      HC_TRY(dev.sync());
    }
    return (now_seconds() - t0) / n;
  };
  {  // A paced CPU device sleeps after each weight-streaming operation: the overshoot.
    const int n = 200;
    const double t0 = now_seconds();
    for (int i = 0; i < n; ++i) std::this_thread::sleep_for(std::chrono::microseconds(50));
    m.sleep_overshoot_us = std::max(0.0, (now_seconds() - t0) / n * 1e6 - 50);
  }
  HC_ASSIGN_OR_RETURN(double sync_s, time_syncs(0));
  HC_ASSIGN_OR_RETURN(double ops_s, time_syncs(1000));
  m.op_us = std::max(0.0, (ops_s - sync_s) / 1000 * 1e6);
  std::vector<TensorView> ws;
  uint64_t bytes = 0;
  int64_t max_in = 0, max_out = 0;
  for (int il = 0; il < hp.n_layer && bytes < (uint64_t{96} << 20); ++il) {
    const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
    for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      if (t->empty()) continue;
      auto w = dev.upload_weight(*t, nullptr, 0, t->ne1, "calibration weights");
      if (!w.ok()) {
        for (const TensorView& u : ws) dev.free_weight(u);
        dev.free(scratch);
        return w.status();
      }
      ws.push_back(*w);
      bytes += static_cast<uint64_t>(row_bytes(t->type, t->ne0)) * static_cast<uint64_t>(t->ne1);
      max_in = std::max(max_in, t->ne0);
      max_out = std::max(max_out, t->ne1);
    }
  }
  auto xy = dev.alloc(static_cast<uint64_t>(max_in + max_out) * sizeof(float), "calibration x, y");
  if (xy.ok()) {
    float* x = static_cast<float*>(*xy);
    std::vector<float> host(static_cast<size_t>(max_in), 0.01f);
    HC_TRY(dev.upload(x, host.data(), host.size() * sizeof(float)));
    double best = 1e30;
    const int reps = static_cast<int>(std::clamp(3e9 / std::max<double>(static_cast<double>(bytes), 1), 5.0, 200.0));
    for (int rep = 0; rep <= reps; ++rep) {
      const double t0 = now_seconds();
      for (const TensorView& w : ws) dev.matmul(w, x, 1, x + max_in);
      HC_TRY(dev.sync());
      if (rep > 0) best = std::min(best, now_seconds() - t0);
    }
    m.dense_gbps = static_cast<double>(bytes) / best / 1e9;
    dev.free(*xy);
  }
  for (const TensorView& u : ws) dev.free_weight(u);
  dev.free(scratch);
  if (!xy.ok()) return xy.status();
  return m;
}

Status calibrate(const SimFlags& f) {
  if (f.model.empty()) return Status::Error("--calibrate needs -m MODEL.gguf");
  if (f.out.empty()) return Status::Error("--calibrate needs -o FILE.json");
  ModelFlags mf;
  mf.model = f.model;
  mf.threads = f.threads;
  HC_LOG_INFO("calibrate: read probe (%d threads)", f.threads);
  const double read0 = best_read_gbps(f.threads);
  HC_ASSIGN_OR_RETURN(auto dense_model, load_model_logged(mf));
  const GgmlType ffn_type = dense_model->weights().layers[0].ffn_up.type;
  HC_ASSIGN_OR_RETURN(double tok_s, decode_tok_s(dense_model, f.threads, f.calib_tokens));
  const double dense_gbps = static_cast<double>(dense_model->weight_bytes_per_token()) * tok_s / 1e9;
  const double read1 = best_read_gbps(f.threads);
  const double read = 0.5 * (read0 + read1);
  if (!(read > 0)) return Status::Error("the read-bandwidth probe failed");
  HC_LOG_INFO("calibrate: probe %.2f / %.2f GB/s, dense decode %.2f tok/s = %.2f GB/s (%.1f%%)",
              read0, read1, tok_s, dense_gbps, 100 * dense_gbps / read);
  // The ceilings validate() holds this run's figures to (HostEfficiency::dense_max, rel_max):
  // a plain read of a buffer the size of a token's weights (a model smaller than the cache is
  // read from cache, faster than the DRAM probe), and of an L1-sized one (nothing a row kernel
  // reads comes faster). 1.25: room for the noise between two timings.
  const auto token_bytes = static_cast<int64_t>(dense_model->weight_bytes_per_token());
  const double resident = token_bytes < kProbeBytes ? best_read_gbps(f.threads, token_bytes) : read;
  const double l1 = best_read_gbps(f.threads, int64_t{16} << 10);
  const double dense_max = 1.25 * std::max(resident, read) / read;
  const double rel_max = 1.25 * std::max(l1, resident) / dense_gbps;
  HC_LOG_INFO("calibrate: a read of %.2f MiB (one token's weights): %.2f GB/s; of 16 KiB: %.2f GB/s",
              token_bytes / 1048576.0, resident, l1);
  if (dense_gbps > 1.1 * read)
    HC_LOG_WARN("calibrate: %s decodes at %.2f GB/s, faster than the memory read probe (%.2f "
                "GB/s): its weights (%.2f MiB) sit in cache, so its efficiency (%.2f) overstates "
                "models larger than the cache; calibrate on one larger than the last-level cache "
                "to project those", f.model.c_str(), dense_gbps, read, token_bytes / 1048576.0,
                dense_gbps / read);

  // The CPU device (before the sparse model, so its probe sees a quiet machine).
  ops::DeviceOptions dopt;
  dopt.kind = ops::DeviceKind::kCpu;
  dopt.n_threads = f.device_threads;
  HC_ASSIGN_OR_RETURN(std::unique_ptr<ops::Device> dev, ops::open_device(dopt));
  const ops::DeviceProfile prof = dev->profile();
  HC_ASSIGN_OR_RETURN(DeviceMeasure dm, measure_device(*dev, *dense_model));
  HC_ASSIGN_OR_RETURN(sparse::HardwareProfile hw, measure_hardware(*dev, *dense_model, f.threads, read));
  HC_LOG_INFO("calibrate: cpu device (%d thread%s) probe %.2f GB/s, matmul %.2f GB/s, op %.2f us, "
              "sync %.2f us, sleep overshoot %.1f us", f.device_threads,
              f.device_threads == 1 ? "" : "s", prof.mem_gbps, dm.dense_gbps, dm.op_us,
              prof.sync_us, dm.sleep_overshoot_us);
  const uint64_t overhead = dev->overhead_bytes();
  dev.reset();

  // Sparse row kernels on the sparse layout (up / down rows, the transposed down matrix).
  ModelFlags sf = mf;
  sf.sparse_ffn = true;
  const int n_layer = dense_model->hparams().n_layer;
  dense_model.reset();
  HC_ASSIGN_OR_RETURN(auto sparse_model, load_model_logged(sf));
  SparseOptions so;
  so.thresholds.assign(static_cast<size_t>(n_layer), 0.0f);
  HC_ASSIGN_OR_RETURN(auto sp, SparseFfn::build(*sparse_model, so));
  json points = json::array();
  for (double share : {0.05, 0.1, 0.2, 0.5, 1.0}) {
    const double g = sparse_rows_gbps(*sparse_model, *sp, share, f.threads);
    HC_LOG_INFO("calibrate: sparse rows at %.0f%% firing: %.2f GB/s (%.2f of dense decode)",
                100 * share, g, g / dense_gbps);
    points.push_back({share, g / dense_gbps, g});
  }
  const double gate_gbps = gate_rows_gbps(*sparse_model, f.threads);
  HC_LOG_INFO("calibrate: cold gate rows in order: %.2f GB/s (%.2f of dense decode)", gate_gbps,
              gate_gbps / dense_gbps);
  json j;
  j["version"] = 1;
  j["date"] = today();
  j["model"] = f.model;
  j["threads"] = f.threads;
  j["host"] = {{"read_gbps", read}, {"read_gbps_before", read0}, {"read_gbps_after", read1},
               {"resident_read_gbps", resident}, {"l1_read_gbps", l1},
               {"cores", static_cast<int>(std::thread::hardware_concurrency())}};
  j["efficiency"] = {{"type", lower(dtype_name(ffn_type))},
                     {"dense", dense_gbps / read},
                     {"dense_gbps", dense_gbps},
                     {"decode_tok_s", tok_s},
                     {"sparse_rel", points},
                     {"gate_rows_rel", gate_gbps / dense_gbps},
                     {"gate_rows_gbps", gate_gbps},
                     {"dense_max", dense_max},
                     {"rel_max", rel_max},
                     {"note", "dense: weight GB/token x decode tok/s / read probe; sparse_rel: "
                              "[firing share, up + down_t row kernels' GB/s / dense GB/s, GB/s]; "
                              "dense_max, rel_max: the bounds these figures are held to, from "
                              "host.resident_read_gbps and host.l1_read_gbps x 1.25"}};
  j["cpu_device"] = {{"threads", f.device_threads},
                     {"mem_gbps", prof.mem_gbps},
                     {"dense_gbps", dm.dense_gbps},
                     {"link_gbps", prof.link_gbps},
                     {"op_us", dm.op_us},
                     {"op_us_profile", prof.op_us},
                     {"sync_us", prof.sync_us},
                     {"sleep_overshoot_us", dm.sleep_overshoot_us},
                     {"overhead_bytes", overhead},
                     {"fixed_bytes", hw.dev_fixed_bytes}};
  const std::string text = j.dump(2) + "\n";
  HC_TRY(write_then_rename(f.out, [&](const std::string& tmp) -> Status {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    o << text;
    o.close();
    if (!o) return Status::Error("cannot write '" + tmp + "'");
    // What --calibration will read: a file it would refuse is never written.
    return read_calibration(tmp).status().with_context("the calibration just measured");
  }));
  if (f.json) std::fputs(text.c_str(), stdout);
  else std::printf("wrote %s\n%s", f.out.c_str(), text.c_str());
  return Status::Ok();
}

// ---- projection ---------------------------------------------------------------------------

uint64_t bytes_of(const TensorView& t) {
  return t.empty() ? 0 : static_cast<uint64_t>(row_bytes(t.type, t.ne0)) * static_cast<uint64_t>(t.ne1);
}

// A real model's bytes, as the engine stores them (plan_input.h's accounting).
Result<sparse::ModelBytes> file_model_bytes(const std::string& path) {
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
  sparse::ModelBytes m;
  const size_t slash = path.find_last_of('/');
  m.name = slash == std::string::npos ? path : path.substr(slash + 1);
  m.n_embd = hp.n_embd;
  m.n_ff = hp.n_ff;
  m.n_vocab = hp.n_vocab;
  const GgmlType t = model->weights().layers[0].ffn_up.type;
  m.type = lower(dtype_name(t));
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = model->weights().layers[static_cast<size_t>(il)];
    sparse::LayerBytes b;
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

struct ShapeJob {
  sparse::ModelBytes bytes;
  GgmlType type = GgmlType::Q4_0;  // the FFN's type (efficiency lookup)
  bool from_file = false;
  double expert_sparsity = 0;  // MoE: the shape's published share of idle expert neurons
  int64_t expert_predictor_rank = 0;
};

struct Run {
  ShapeJob shape;
  sparse::HardwareSpec hw;
  sparse::HostEfficiency eff;
  uint64_t budget = 0;
  double expert_firing = 1;
  sparse::SimResult result;
};

Result<std::vector<ShapeJob>> shapes_from_flags(const SimFlags& f) {
  std::vector<ShapeJob> out;
  std::string shape = f.shape;
  std::string file;
  if (!f.model.empty()) file = f.model;
  if (shape.rfind("file:", 0) == 0) file = shape.substr(5);
  if (!file.empty()) {
    HC_ASSIGN_OR_RETURN(sparse::ModelBytes mb, file_model_bytes(file));
    ShapeJob j;
    if (!dtype_from_name(mb.type, &j.type)) j.type = GgmlType::Q4_0;
    j.bytes = std::move(mb);
    j.from_file = true;
    out.push_back(std::move(j));
    return out;
  }
  GgmlType t = GgmlType::Q4_0;
  const std::string type = f.type.empty() ? "q4_0" : f.type;
  if (!dtype_from_name(type, &t) || sparse::bytes_per_weight(t) <= 0)
    return Status::Error("--type: expected a weight type such as f16, q8_0, q4_0, q4_k, found '" +
                         type + "'");
  std::vector<sparse::ModelShape> shapes;
  if (shape.empty()) shape = "llama2-7b";
  if (shape == "all") {
    shapes = sparse::shape_catalog();
  } else {
    HC_ASSIGN_OR_RETURN(sparse::ModelShape s, in_context(sparse::find_shape(shape), "--model-shape"));
    shapes.push_back(s);
  }
  for (sparse::ModelShape s : shapes) {
    if (s.moe() && f.expert_pred_rank >= 0) s.expert_predictor_rank = f.expert_pred_rank;
    HC_ASSIGN_OR_RETURN(sparse::ModelBytes mb, sparse::model_bytes(s, t));
    mb.type = lower(mb.type);
    out.push_back({std::move(mb), t, false, s.expert_sparsity, s.expert_predictor_rank});
  }
  return out;
}

Result<sparse::HardwareSpec> host_hardware(const Calibration& c) {
  if (!c.has_device)
    return Status::Error("calibration '" + c.path + "' has no \"cpu_device\" figures");
  sparse::HardwareSpec h;
  h.key = "host";
  h.description = "this machine (" + std::to_string(c.threads) + " threads, read probe " +
                  fmt("%.1f", c.read_gbps) + " GB/s) + CPU device (" +
                  std::to_string(c.device_threads) + " thread" + (c.device_threads == 1 ? "" : "s") +
                  ", " + fmt("%.1f", c.dev_dense_gbps) + " GB/s" +
                  (c.threads + c.device_threads <= c.cores ? "" : ", sharing the host's cores") + ")";
  h.host_peak_gbps = c.read_gbps;
  h.host_read_fraction = 1;
  h.host_cores = c.threads;
  h.has_device = true;
  h.dev_peak_gbps = c.dev_dense_gbps;
  h.dev_eff = 1;
  h.link_gbps = c.link_gbps;
  h.op_us = c.op_us;
  h.sync_us = c.sync_us;
  h.dev_overhead_bytes = c.dev_overhead_bytes;
  h.dev_fixed_bytes = c.dev_fixed_bytes;
  // The CPU device's threads share the host's cores unless there are cores to spare.
  h.overlap = c.cores > 0 && c.threads + c.device_threads <= c.cores;
  h.source = "calibration " + c.path + (c.date.empty() ? "" : " (" + c.date + ")");
  return h;
}

Result<std::vector<sparse::HardwareSpec>> hardware_from_flags(const SimFlags& f,
                                                              const Calibration* cal) {
  std::vector<sparse::HardwareSpec> out;
  if (f.hw == "all") {
    out = sparse::hardware_catalog();
    if (cal) {
      HC_ASSIGN_OR_RETURN(sparse::HardwareSpec h, host_hardware(*cal));
      out.push_back(h);
    }
  } else if (f.hw == "host") {
    if (!cal) return Status::Error("--hw host: this machine's figures come from --calibration "
                                   "FILE.json (make one with --calibrate -m MODEL.gguf -o FILE.json)");
    HC_ASSIGN_OR_RETURN(sparse::HardwareSpec h, host_hardware(*cal));
    out.push_back(h);
  } else {
    HC_ASSIGN_OR_RETURN(sparse::HardwareSpec h, in_context(sparse::find_hardware(f.hw), "--hw"));
    out.push_back(h);
  }
  for (sparse::HardwareSpec& h : out) {
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
    HC_TRY(h.validate());
  }
  return out;
}

// Per-layer firing of the profiling distribution for one shape.
struct Firing {
  std::string description;
  std::vector<std::vector<double>> profile;  // [n_layer][n_units]
  double expert_firing = 1;                  // MoE: share of a routed expert's neurons firing
};

// Measured routing (an MoE model's statistics, hotcold profile): every layer's expert_count,
// resampled to the shape; for a shape whose experts are sparse and as wide as the profiled
// model's, the measured share of an expert's neurons firing when it is routed to.
Result<Firing> measured_routing(const SimFlags& f, const ShapeJob& sj, const ActStats& st) {
  const sparse::ModelBytes& m = sj.bytes;
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
                      in_context(sparse::routing_from_counts(counts, st.n_tokens(), m.n_layer(),
                                                             m.n_expert, m.n_expert_used),
                                 "--stats '" + f.stats + "'"));
  const int64_t width = st.n_ff() / st.n_expert();
  const bool same = st.n_layer() == m.n_layer() && st.n_expert() == m.n_expert;
  fr.description = "statistics " + f.stats + " (" + std::to_string(st.n_layer()) + " layers x " +
                   std::to_string(st.n_expert()) + " experts, " + std::to_string(st.n_tokens()) +
                   " tokens" + (same ? "" : ", resampled by rank quantile") + "), " +
                   fmt("%.1f", 100 * sparse::neurons_covering(fr.profile[0], 0.8)) +
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
  const sparse::ModelBytes& m = sj.bytes;
  if (stats) return measured_routing(f, sj, *stats);
  Firing fr;
  HC_ASSIGN_OR_RETURN(
      std::vector<double> p,
      in_context(sparse::expert_routing_probs(m.n_expert, m.n_expert_used, f.expert_skew),
                 "--expert-skew"));
  fr.profile.assign(static_cast<size_t>(m.n_layer()), p);
  const double mean = static_cast<double>(m.n_expert_used) / m.n_expert;
  fr.description = std::to_string(m.n_expert_used) + " of " + std::to_string(m.n_expert) +
                   " experts per token, routing power law p(x) = min(1, " +
                   fmt("%.4g", p.back() * std::pow(1 - 0.5 / m.n_expert, f.expert_skew)) + " x^-" +
                   fmt("%.2f", f.expert_skew) + "): the most routed expert takes " +
                   fmt("%.1f", 100 * p[0]) + "% of the tokens (" + fmt("%.2f", p[0] / mean) +
                   "x the mean), " + fmt("%.1f", 100 * sparse::neurons_covering(p, 0.8)) +
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

Result<Firing> firing_for(const SimFlags& f, const ShapeJob& sj, const ActStats* stats) {
  const sparse::ModelBytes& m = sj.bytes;
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
    HC_ASSIGN_OR_RETURN(fr.profile, in_context(sparse::rescale_firing(src, m.n_layer(), m.n_ff),
                                                "--stats '" + f.stats + "'"));
    const bool same = stats->n_layer() == m.n_layer() && stats->n_ff() == m.n_ff;
    fr.description = "statistics " + f.stats + " (" + std::to_string(stats->n_layer()) + " x " +
                     std::to_string(stats->n_ff()) + ", " + std::to_string(stats->n_tokens()) +
                     " tokens" + (same ? "" : ", resampled by rank quantile") + ")";
    return fr;
  }
  const double share = 1.0 - (f.sparsity >= 0 ? f.sparsity : 1.0 - sparse::kPowerInferFiringShare);
  HC_ASSIGN_OR_RETURN(sparse::PowerLaw pl,
                      in_context(sparse::fit_power_law(m.n_ff, share, f.cover), "--sparsity / --cover80"));
  const std::vector<double> p = sparse::power_law_probs(pl, m.n_ff);
  fr.profile.assign(static_cast<size_t>(m.n_layer()), p);
  fr.description = "power law p(x) = min(1, " + fmt("%.4g", pl.c) + " x^-" + fmt("%.4f", pl.a) +
                   ") fitted to " + fmt("%.1f", 100 * share) + "% firing and " +
                   fmt("%.1f", 100.0 * f.cover) + "% of neurons carrying 80% of the firings";
  return fr;
}

std::string on_device_text(const sparse::ModeResult& r, const sparse::ModelBytes& m) {
  if (r.mode == "dense-cpu" || r.mode == "sparse-cpu") return "-";
  const std::string n_layer = std::to_string(m.n_layer());
  std::string s;
  if (r.mode == "dense-offload") {
    s = std::to_string(r.layers_on_device) + "/" + n_layer + " layers";
  } else if (r.mode == "llamacpp-cpu-moe") {
    s = std::to_string(r.attn_on_device) + " attention, experts of " +
        std::to_string(r.layers_on_device) + "/" + n_layer + " layers (--n-cpu-moe " +
        std::to_string(r.n_cpu_moe) + ")";
  } else {
    s = std::to_string(r.attn_on_device) + " attention, " + std::to_string(r.hot_neurons) +
        (m.moe() ? " experts in " : " neurons in ") + std::to_string(r.layers_on_device) +
        " layers";
  }
  if (r.output_on_device) s += ", output";
  if (r.mode == "dynamic")
    s += "; migration " + fmt("%.3f", r.migration_s * 1e3) + " ms/token (" +
         fmt("%.1f", r.migration_bytes_per_token / 1024) + " KiB/token)";
  return s;
}

json mode_json(const sparse::ModeResult& r) {
  return {{"mode", r.mode},
          {"tok_s", r.tok_s},
          {"ms_per_token", r.s_per_token * 1e3},
          {"device_bytes", r.device_bytes},
          {"device_mass", r.device_mass},
          {"layers_on_device", r.layers_on_device},
          {"attn_on_device", r.attn_on_device},
          {"hot_neurons", r.hot_neurons},
          {"output_on_device", r.output_on_device},
          {"migration_ms", r.migration_s * 1e3},
          {"migration_bytes_per_token", r.migration_bytes_per_token},
          {"n_cpu_moe", r.n_cpu_moe},
          {"solver", r.solver}};
}

// tok/s over the llama.cpp mode's (llamacpp-cpu-moe, else dense-offload); 0 when none ran.
double vs_llamacpp(const sparse::SimResult& res, const sparse::ModeResult& m) {
  const sparse::ModeResult* base = res.llamacpp();
  return base && base->tok_s > 0 ? m.tok_s / base->tok_s : 0.0;
}

Status project(const SimFlags& f) {
  std::optional<Calibration> cal;
  if (!f.calibration.empty()) {
    HC_ASSIGN_OR_RETURN(Calibration c, read_calibration(f.calibration));
    cal = std::move(c);
  }
  HC_ASSIGN_OR_RETURN(std::vector<sparse::HardwareSpec> hws,
                      hardware_from_flags(f, cal ? &*cal : nullptr));
  HC_ASSIGN_OR_RETURN(std::vector<ShapeJob> shapes, shapes_from_flags(f));
  std::optional<ActStats> stats;
  if (!f.stats.empty()) {
    HC_ASSIGN_OR_RETURN(ActStats s, ActStats::read(f.stats));
    stats = std::move(s);
  }
  std::optional<sparse::PlacementPlan> plan;
  if (!f.plan.empty()) {
    HC_ASSIGN_OR_RETURN(sparse::PlacementPlan p, sparse::read_plan(f.plan));
    plan = std::move(p);
  }
  sparse::SimOptions opt;
  opt.n_ctx = f.ctx;
  opt.n_gpu_layers = f.ngl;
  opt.drift = f.drift;
  opt.drift_seed = static_cast<uint64_t>(f.seed);
  opt.drift_period_tokens = f.drift_period;
  opt.use_ilp = f.solver == "best";
  opt.ilp_time_limit_s = f.time_limit;
  opt.granule = f.granule;
  opt.plan = plan ? &*plan : nullptr;
  opt.output_on_device = !f.no_output_on_device;
  opt.predictor = f.predictor;
  opt.predictor_rank = f.predictor_rank;
  opt.max_union_share = f.union_max;

  std::vector<Run> runs;
  std::vector<std::string> firing_notes;
  opt.n_cpu_moe = f.n_cpu_moe;
  for (const ShapeJob& sj : shapes) {
    HC_ASSIGN_OR_RETURN(Firing fr, firing_for(f, sj, stats ? &*stats : nullptr));
    firing_notes.push_back((sj.bytes.moe() ? "routing: " : "firing: ") + sj.bytes.name + ": " +
                           fr.description);
    for (const sparse::HardwareSpec& hw : hws) {
      Run run;
      run.shape = sj;
      run.hw = hw;
      run.eff = cal && cal->eff.type == lower(dtype_name(sj.type)) ? cal->eff
                                                                  : sparse::builtin_host_efficiency(sj.type);
      if (f.host_eff > 0) {
        run.eff.dense = f.host_eff;
        run.eff.source += ", dense efficiency given";
      }
      run.budget = f.vram_gib >= 0 ? static_cast<uint64_t>(static_cast<double>(f.vram_gib) * kGiBd)
                                   : hw.default_budget();
      sparse::SimInput in{sj.bytes, hw, run.eff, fr.profile, fr.expert_firing};
      opt.budget_bytes = run.budget;
      run.expert_firing = fr.expert_firing;
      HC_ASSIGN_OR_RETURN(run.result, in_context(sparse::simulate(in, opt), sj.bytes.name + " on " + hw.key));
      runs.push_back(std::move(run));
    }
  }

  if (f.json) {
    json out;
    out["results"] = json::array();
    for (const Run& r : runs) {
      json modes = json::array();
      for (const sparse::ModeResult& m : r.result.modes) {
        json mj = mode_json(m);
        mj["vs_llamacpp"] = vs_llamacpp(r.result, m);
        modes.push_back(std::move(mj));
      }
      const sparse::ModeResult* base = r.result.llamacpp();
      out["results"].push_back({{"model", r.shape.bytes.name},
                                {"type", r.shape.bytes.type},
                                {"n_layer", r.shape.bytes.n_layer()},
                                {"n_ff", r.shape.bytes.n_ff},
                                {"n_expert", r.shape.bytes.n_expert},
                                {"n_expert_used", r.shape.bytes.n_expert_used},
                                {"unit", r.shape.bytes.moe() ? "expert" : "neuron"},
                                {"expert_firing", r.expert_firing},
                                {"llamacpp_mode", base ? base->mode : ""},
                                {"weight_bytes", r.shape.bytes.weight_bytes()},
                                {"hw", r.hw.key},
                                {"hw_description", r.hw.description},
                                {"budget_bytes", r.budget},
                                {"n_ctx", f.ctx},
                                {"host_gbps", r.hw.host_read_gbps() * r.eff.dense},
                                {"dev_gbps", r.hw.dev_gbps()},
                                {"link_gbps", r.hw.link_gbps},
                                {"overlap", r.hw.overlap},
                                {"efficiency_source", r.eff.source},
                                {"firing_share", r.result.firing_share},
                                {"cover80", r.result.cover80},
                                {"drift", f.drift},
                                {"top20_overlap", r.result.top20_overlap},
                                {"modes", modes}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : firing_notes) std::printf("# %s\n", n.c_str());
  std::printf("# drift %.2f (top-20%% overlap between profile and serving %.1f%%), migration "
              "amortised over %g tokens; context %d\n",
              f.drift, 100 * (runs.empty() ? 1.0 : runs[0].result.top20_overlap), f.drift_period,
              f.ctx);
  std::vector<std::string> seen;
  for (const Run& r : runs) {
    const std::string key = r.hw.key + "|" + r.eff.source;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    std::printf("# %s: %s; host %.1f GB/s x %.2f read x %.3f dense = %.1f GB/s achieved (sparse "
                "rows x %.2f at 10%% firing, cold gate rows x %.2f; %s); device %.0f x %.2f = "
                "%.0f GB/s, link %.1f GB/s, "
                "op %.2f us, sync %.2f us\n",
                r.hw.key.c_str(), r.hw.description.c_str(), r.hw.host_peak_gbps,
                r.hw.host_read_fraction, r.eff.dense, r.hw.host_read_gbps() * r.eff.dense,
                r.eff.sparse_at(0.1), r.eff.gate_rows(), r.eff.source.c_str(), r.hw.dev_peak_gbps,
                r.hw.dev_eff,
                r.hw.dev_gbps(), r.hw.link_gbps, r.hw.op_us, r.hw.sync_us);
  }
  std::printf(
      "\n| model | hw | budget GiB | mode | tok/s | ms/token | x llama.cpp | device GiB "
      "| FFN firing mass on device | on device | solver |\n"
      "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|\n");
  for (const Run& r : runs)
    for (const sparse::ModeResult& m : r.result.modes) {
      const double ratio = vs_llamacpp(r.result, m);
      std::printf("| %s %s | %s | %.2f | %s | %.2f | %.2f | %s | %.2f | %.1f%% | %s | %s |\n",
                  r.shape.bytes.name.c_str(), r.shape.bytes.type.c_str(), r.hw.key.c_str(),
                  r.budget >= (uint64_t{1} << 60) ? INFINITY : r.budget / kGiBd, m.mode.c_str(),
                  m.tok_s, m.s_per_token * 1e3, ratio > 0 ? fmt("%.2f", ratio).c_str() : "-",
                  m.device_bytes / kGiBd, 100 * m.device_mass,
                  on_device_text(m, r.shape.bytes).c_str(), m.solver.c_str());
    }
  return Status::Ok();
}

}  // namespace

int cmd_simulate(const Args& args) {
  SimFlags f;
  ArgParser p(kCmd,
              "project decode tokens/s of LLaMA-shaped and MoE models on named hardware "
              "for dense layer offload, llama.cpp's experts-on-CPU split, static and "
              "dynamic hot/cold placement (docs/SIMULATE.md)");
  p.add_string("--model-shape", &f.shape,
               "llama2-7b, llama2-13b, llama-33b, llama2-70b (or 7b/13b/33b/70b), the MoE shapes "
               "qwen3-30b-a3b, mixtral-8x7b, turbosparse-mixtral, all, or file:PATH.gguf for a "
               "real model's shape and types (\"\": llama2-7b)");
  p.add_string("-m,--model", &f.model,
               "a real GGUF: its shape (as file:PATH), or the model --calibrate measures");
  p.add_string("--hw", &f.hw, "rtx4090, a100-80g, a100-40g, host (this machine, needs "
                              "--calibration) or all");
  p.add_string("--type", &f.type, "weight type of a catalog shape: f16, q8_0, q4_0, q4_k, ... "
                                  "(\"\": q4_0)");
  p.add_float("--sparsity", &f.sparsity,
              "power law: share of neurons not firing per token "
              "(-1: 0.9, PowerInfer's ~10% firing); MoE: share of a "
              "routed expert's neurons not firing (-1: the shape's)");
  p.add_float("--expert-skew", &f.expert_skew,
              "MoE: exponent a of the routing power law p(x) = min(1, c x^-a) over expert ranks "
              "(0: uniform routing)");
  p.add_int("--expert-predictor-rank", &f.expert_pred_rank,
            "MoE with sparse experts: rank of each expert's F16 predictor (0: none, every gate "
            "row read; -1: the shape's)");
  p.add_int("--n-cpu-moe", &f.n_cpu_moe,
            "llamacpp-cpu-moe: experts of the first N layers on "
            "the host (-1: the fewest that let the rest fit)");
  p.add_float("--cover80", &f.cover, "power law: share of neurons carrying 80% of the firings "
                                     "(LLaMA2(ReGLU)-70B's in PowerInfer)");
  p.add_string("--stats", &f.stats, "measured statistics (hotcold profile) instead of the power "
                                    "law, resampled to the shape by rank quantile");
  p.add_float("--vram-budget", &f.vram_gib, "device budget in GiB (-1: its memory minus the "
                                            "reserve)");
  p.add_float("--drift", &f.drift, "share of neurons whose ranks the serving distribution "
                                   "permutes against the profile");
  p.add_float("--drift-period", &f.drift_period, "tokens between drifts: the dynamic mode's "
                                                 "migration is amortised over them");
  p.add_int("--seed", &f.seed, "seed of the drift permutation");
  p.add_int("-c,--ctx-size", &f.ctx, "context: KV on the device, half of it read per token");
  p.add_int("-ngl,--n-gpu-layers", &f.ngl, "dense-offload: exactly N trailing layers (N > layers "
                                           "also the output); -1: as many as fit");
  p.add_string("--plan", &f.plan, "static: evaluate this plan file instead of planning");
  p.add_string("--solver", &f.solver, "greedy, or best (greedy and the ILP)");
  p.add_float("--time-limit", &f.time_limit, "ILP time limit in seconds with --solver best");
  p.add_int("--granule", &f.granule, "planner granule in neurons");
  p.add_flag("--predictor", &f.predictor, "predictor-driven sparse FFN (the gate only over the "
                                          "predicted set; predictors on the host)");
  p.add_int("--predictor-rank", &f.predictor_rank, "predictor rank (0: n_embd / 16)");
  p.add_flag("--no-output-on-device", &f.no_output_on_device,
             "hot/cold modes keep the output matrix on the host (as the executor does)");
  p.add_float("--sparse-union-max", &f.union_max,
              "the executor's limit: a host layer firing more than this share runs its FFN over "
              "every row");
  p.add_string("--calibration", &f.calibration, "this machine's figures from --calibrate "
                                                "(efficiencies; --hw host)");
  p.add_float("--host-gbps", &f.host_gbps, "host read bandwidth in GB/s, replacing peak x read "
                                           "fraction (0: the hardware's)");
  p.add_float("--host-eff", &f.host_eff, "host dense decode efficiency, achieved / read (0: calibrated or built-in)");
  p.add_float("--dev-gbps", &f.dev_gbps, "device memory bandwidth in GB/s (0: the hardware's)");
  p.add_float("--dev-eff", &f.dev_eff, "device efficiency, achieved / bandwidth, (0, 1] (0: the hardware's)");
  p.add_float("--link-gbps", &f.link_gbps, "host <-> device bandwidth in GB/s (0: the hardware's)");
  p.add_float("--op-us", &f.op_us, "cost of one device operation in us (-1: the hardware's)");
  p.add_float("--sync-us", &f.sync_us, "one host/device round trip in us (-1: the hardware's)");
  p.add_float("--device-emulate-gbps", &f.emulate_gbps,
              "--hw host: the CPU device paced to this bandwidth, as bench's flag of that name "
              "(each paced operation also pays the calibrated sleep overshoot)");
  p.add_flag("--json", &f.json, "print JSON instead of tables");
  p.add_flag("--calibrate", &f.calibrate, "measure this machine on -m MODEL and write -o FILE.json");
  p.add_string("-o,--output", &f.out, "--calibrate: the JSON file to write");
  p.add_int("-t,--threads", &f.threads, "--calibrate: host threads");
  p.add_int("--device-threads", &f.device_threads, "--calibrate: CPU device threads");
  p.add_int("--calib-tokens", &f.calib_tokens, "--calibrate: decode tokens per pass");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.calibrate) {
    if (f.model.empty() || f.out.empty())
      return usage_error(kCmd, "--calibrate: expected -m MODEL.gguf -o FILE.json");
    if (f.threads < 1 || f.threads > 512 || f.device_threads < 1 || f.device_threads > 512)
      return usage_error(kCmd, "-t / --device-threads: expected 1..512, found " +
                                   std::to_string(f.threads) + " / " + std::to_string(f.device_threads));
    if (f.calib_tokens < 1)
      return usage_error(kCmd, "--calib-tokens: expected >= 1, found " + std::to_string(f.calib_tokens));
    return exit_code_for(kCmd, calibrate(f));
  }
  if (f.sparsity >= 0 && !(f.sparsity < 1))
    return usage_error(kCmd, "--sparsity: expected a share in [0, 1), found " + fmt("%g", f.sparsity));
  if (f.sparsity >= 0 && !f.stats.empty())
    return usage_error(kCmd, "--sparsity shapes the power law; --stats brings its own firing: give "
                             "one of them");
  if (!(f.union_max >= 0 && f.union_max <= 1))
    return usage_error(kCmd, "--sparse-union-max: expected a share in [0, 1], found " +
                                 fmt("%g", f.union_max));
  if (!(f.cover > 0 && f.cover <= 1))
    return usage_error(kCmd, "--cover80: expected a share in (0, 1], found " + fmt("%g", f.cover));
  if (!(f.drift >= 0 && f.drift <= 1))
    return usage_error(kCmd, "--drift: expected a share in [0, 1], found " + fmt("%g", f.drift));
  if (!(f.drift_period > 0))
    return usage_error(kCmd, "--drift-period: expected > 0 tokens, found " + fmt("%g", f.drift_period));
  if (f.vram_gib != -1 && !(f.vram_gib >= 0 && std::isfinite(f.vram_gib)))
    return usage_error(kCmd, "--vram-budget: expected GiB >= 0, found " + fmt("%g", f.vram_gib));
  if (f.ctx < 1) return usage_error(kCmd, "-c: expected >= 1 positions, found " + std::to_string(f.ctx));
  if (f.ngl < -1) return usage_error(kCmd, "-ngl: expected >= 0 layers, found " + std::to_string(f.ngl));
  if (f.granule < 1)
    return usage_error(kCmd, "--granule: expected >= 1, found " + std::to_string(f.granule));
  if (f.solver != "greedy" && f.solver != "best")
    return usage_error(kCmd, "--solver: expected greedy or best, found '" + f.solver + "'");
  if (f.dev_eff < 0 || f.dev_eff > 1)
    return usage_error(kCmd, "--dev-eff: expected (0, 1], found " + fmt("%g", f.dev_eff));
  if (f.host_gbps < 0 || f.host_eff < 0 || f.dev_gbps < 0 || f.link_gbps < 0)
    return usage_error(kCmd, "--host-gbps, --host-eff, --dev-gbps, --link-gbps: expected > 0");
  if (f.emulate_gbps < 0 || (f.emulate_gbps > 0 && f.hw != "host"))
    return usage_error(kCmd, "--device-emulate-gbps: expected GB/s > 0 with --hw host (the paced "
                             "CPU device), found " + fmt("%g", f.emulate_gbps) + " with --hw " + f.hw);
  if (f.predictor_rank < 0)
    return usage_error(kCmd, "--predictor-rank: expected >= 0, found " + std::to_string(f.predictor_rank));
  if (!(f.expert_skew >= 0 && f.expert_skew <= 20))
    return usage_error(kCmd,
                       "--expert-skew: expected an exponent in [0, 20] (0: uniform routing), "
                       "found " +
                           fmt("%g", f.expert_skew));
  if (f.expert_pred_rank < -1 || f.n_cpu_moe < -1)
    return usage_error(
        kCmd, "--expert-predictor-rank / --n-cpu-moe: expected >= 0 (or -1), found " +
                  std::to_string(f.expert_pred_rank) + " / " + std::to_string(f.n_cpu_moe));
  const bool file_shape = !f.model.empty() || f.shape.rfind("file:", 0) == 0;
  if (!f.model.empty() && !f.shape.empty())
    return usage_error(kCmd, "-m names the model whose shape is simulated: drop --model-shape (or "
                             "use --model-shape file:PATH)");
  if (file_shape && !f.type.empty())
    return usage_error(kCmd, "--type applies to catalog shapes; a file's own weight types are used");
  if (GgmlType t; !f.type.empty() && (!dtype_from_name(f.type, &t) || sparse::bytes_per_weight(t) <= 0))
    return usage_error(kCmd, "--type: expected a weight type such as f16, q8_0, q4_0, q4_k, found '" +
                                 f.type + "'");
  if (f.hw != "all" && f.hw != "host") {
    if (auto h = sparse::find_hardware(f.hw); !h.ok()) return usage_error(kCmd, "--hw: " + h.message());
  }
  if (!file_shape && !f.shape.empty() && f.shape != "all") {
    if (auto s = sparse::find_shape(f.shape); !s.ok())
      return usage_error(kCmd, "--model-shape: " + s.message());
  }
  if (f.hw == "host" && f.calibration.empty())
    return usage_error(kCmd, "--hw host: this machine's figures come from --calibration FILE.json "
                             "(make one with --calibrate -m MODEL.gguf -o FILE.json)");
  return exit_code_for(kCmd, project(f));
}

}  // namespace hc
