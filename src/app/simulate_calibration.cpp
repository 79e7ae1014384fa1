// hotcold simulate --calibrate and --calibration (app/simulate_calibration.h).
#include "app/simulate_calibration.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/common.h"
#include "app/plan_input.h"
#include "core/log.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/sparse.h"
#include "perfmodel/simulate.h"

namespace hc::simcmd {

using json = nlohmann::json;

namespace {

Result<double> number_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number())
    return Status::Error(where + ": expected a number at \"" + key + "\", found " +
                         (j.contains(key) ? j[key].dump() : std::string("nothing")));
  return j[key].get<double>();
}

}  // namespace

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

namespace {

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
  for (int32_t& t : toks)
    t = static_cast<int32_t>(rng() % static_cast<uint32_t>(model->hparams().n_vocab));
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first pass warms the pages up and is not counted
    s.truncate(0);
    const double t0 = now_seconds();
    for (int i = 0; i < n_tok; ++i)
      HC_TRY(s.eval(std::span<const int32_t>(&toks[static_cast<size_t>(i)], 1)));
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
    const int reps = static_cast<int>(
        std::clamp(3e9 / std::max<double>(static_cast<double>(bytes), 1), 5.0, 200.0));
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

}  // namespace

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
  const double dense_gbps =
      static_cast<double>(dense_model->weight_bytes_per_token()) * tok_s / 1e9;
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
  HC_LOG_INFO(
      "calibrate: a read of %.2f MiB (one token's weights): %.2f GB/s; of 16 KiB: %.2f GB/s",
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
  HC_ASSIGN_OR_RETURN(sparse::HardwareProfile hw,
                      measure_hardware(*dev, *dense_model, f.threads, read));
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

Result<perfmodel::HardwareSpec> host_hardware(const Calibration& c) {
  if (!c.has_device)
    return Status::Error("calibration '" + c.path + "' has no \"cpu_device\" figures");
  perfmodel::HardwareSpec h;
  h.key = "host";
  h.description =
      "this machine (" + std::to_string(c.threads) + " threads, read probe " +
      fmt("%.1f", c.read_gbps) + " GB/s) + CPU device (" + std::to_string(c.device_threads) +
      " thread" + (c.device_threads == 1 ? "" : "s") + ", " + fmt("%.1f", c.dev_dense_gbps) +
      " GB/s" + (c.threads + c.device_threads <= c.cores ? "" : ", sharing the host's cores") + ")";
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

}  // namespace hc::simcmd
