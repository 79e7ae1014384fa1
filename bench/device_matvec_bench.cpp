// hc-device-bench: the dense mat-vec (Device::matmul with one token: batch-1 decode) of every
// weight type on a second device, as a share of the device's own measured memory bandwidth
// (DeviceProfile::mem_gbps, measured at open: CUDA's read probe, Vulkan's read_probe shader,
// the CPU device's read kernel). Issue 35's kernel target is >= 70% of it on the GPU.
//
//   hc-device-bench [--device cuda|vulkan[:N]|cpu] [--types q4_0,q4_k,q8_0,f16]
//                   [--rows R] [--cols C] [--mib M] [--reps N] [--json]
//
// Per type: matrices of R x C (default 4096 x 4096) filling M MiB (default 1024; past any
// cache), one mat-vec on each in turn, N rounds (default 5) after one warm-up round, one sync
// per round; GB/s = weight bytes read / wall time of a round, the best round reported. The
// rows are 256 distinct quantised random rows repeated (the bytes, not the values, matter for
// speed). Output: a Markdown table, or with --json one object per type on one line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/device_setup.h"
#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/device.h"
#include "quant/quant.h"

namespace hc {
namespace {

constexpr char kTool[] = "hc-device-bench";

struct Args {
  std::string device = "auto";
  std::string types = "q4_0,q4_k,q8_0,f16";
  int rows = 4096, cols = 4096;
  int mib = 1024;
  int reps = 5;
  bool json = false;
};

int error(const std::string& message, int exit_code) {
  std::fprintf(stderr, "%s: error: %s\n", kTool, message.c_str());
  return exit_code;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Row {
  std::string type;
  int64_t matrices = 0;
  double bytes = 0, best_gbps = 0, device_gbps = 0;
};

// One type's measurement; an error names what failed.
Result<Row> measure(ops::Device& dev, GgmlType t, const std::string& name, const Args& a) {
  const int64_t bs = dtype_traits(t).block_size;
  if (bs <= 0 || a.cols % bs != 0)
    return Status::Error(name + ": --cols " + std::to_string(a.cols) + " is not a multiple of " +
                         std::to_string(bs));
  const int64_t rb = row_bytes(t, a.cols);
  const uint64_t mat_bytes = static_cast<uint64_t>(rb * a.rows);
  const int64_t n_mat =
      std::max<int64_t>(1, static_cast<int64_t>((static_cast<uint64_t>(a.mib) << 20) / mat_bytes));
  // 256 quantised random rows, repeated over one host matrix, uploaded n_mat times.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(a.cols));
  std::vector<uint8_t> distinct(static_cast<size_t>(256 * rb));
  for (int r = 0; r < 256; ++r) {
    for (float& v : f) v = nd(rng);
    quant::quantize_row(t, f.data(), distinct.data() + r * rb, a.cols);
  }
  std::vector<uint8_t> host(mat_bytes);
  for (int64_t r = 0; r < a.rows; ++r)
    std::memcpy(host.data() + r * rb, distinct.data() + (r % 256) * rb, static_cast<size_t>(rb));
  const TensorView hv = TensorView::make(t, host.data(), a.cols, a.rows);
  std::vector<TensorView> w;
  struct Free {
    ops::Device& d;
    std::vector<TensorView>& w;
    ~Free() {
      for (const TensorView& v : w) d.free_weight(v);
    }
  } free_all{dev, w};
  for (int64_t m = 0; m < n_mat; ++m) {
    auto up = dev.upload_weight(hv, nullptr, 0, a.rows, "hc-device-bench weights");
    if (!up.ok()) return up.status();
    w.push_back(*up);
  }
  auto x = dev.alloc(static_cast<uint64_t>(a.cols) * 4, "x");
  if (!x.ok()) return x.status();
  auto y = dev.alloc(static_cast<uint64_t>(a.rows) * 4, "y");
  if (!y.ok()) {
    dev.free(*x);
    return y.status();
  }
  for (float& v : f) v = nd(rng);
  Status st = dev.upload(*x, f.data(), static_cast<uint64_t>(a.cols) * 4);
  Row row{name, n_mat, static_cast<double>(mat_bytes) * static_cast<double>(n_mat), 0,
          dev.profile().mem_gbps};
  for (int rep = 0; st.ok() && rep <= a.reps; ++rep) {
    const double t0 = now_s();
    for (const TensorView& m : w)
      dev.matmul(m, static_cast<const float*>(*x), 1, static_cast<float*>(*y));
    st = dev.sync();
    const double s = now_s() - t0;
    if (rep > 0 && st.ok()) row.best_gbps = std::max(row.best_gbps, row.bytes / s / 1e9);
  }
  dev.free(*x);
  dev.free(*y);
  if (!st.ok()) return st;
  return row;
}

int run(const std::vector<std::string>& argv) {
  Args a;
  ArgParser p(kTool, "the one-token mat-vec of each weight type on a device, against its "
                     "measured read bandwidth");
  p.add_string("--device", &a.device, "auto, cuda, vulkan[:N] or cpu");
  p.add_string("--types", &a.types, "comma-separated weight types");
  p.add_int("--rows", &a.rows, "rows of each matrix");
  p.add_int("--cols", &a.cols, "columns of each matrix");
  p.add_int("--mib", &a.mib, "MiB of weights per type (matrices of rows x cols)");
  p.add_int("--reps", &a.reps, "timed rounds after one warm-up (the best reported)");
  p.add_flag("--json", &a.json, "one JSON object per type instead of a table");
  const Status st = p.parse(argv);
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (!st.ok()) return error(st.message(), 2);
  if (a.rows < 1 || a.cols < 1 || a.mib < 1 || a.reps < 1)
    return error("--rows, --cols, --mib and --reps must be >= 1", 2);
  std::vector<std::string> types;
  std::stringstream ss(a.types);
  for (std::string t; std::getline(ss, t, ',');) types.push_back(t);
  DeviceFlags df;
  df.device = a.device;
  auto dev = open_device_from_flags(df, 0);
  if (!dev.ok()) {
    return error(dev.message(), 1);
  }
  if (!a.json) {
    std::printf("%s: measured read bandwidth %.1f GB/s\n\n", (*dev)->name().c_str(),
                (*dev)->profile().mem_gbps);
    std::printf("| type | matrix | matrices | MiB read | mat-vec GB/s (best of %d) | share of read bandwidth |\n"
                "|---|---|---|---|---|---|\n", a.reps);
  }
  int rc = 0;
  for (const std::string& name : types) {
    GgmlType t;
    if (!dtype_from_name(name, &t)) {
      rc = error("--types: unknown type '" + name + "'", 1);
      continue;
    }
    auto r = measure(**dev, t, name, a);
    if (!r.ok()) {
      rc = error(name + ": " + r.message(), 1);
      continue;
    }
    const double share = r->device_gbps > 0 ? r->best_gbps / r->device_gbps : 0;
    if (a.json)
      std::printf("{\"device\": \"%s\", \"type\": \"%s\", \"rows\": %lld, \"cols\": %lld, "
                  "\"matrices\": %lld, \"gbps\": %.2f, \"device_gbps\": %.2f, \"share\": %.4f}\n",
                  (*dev)->name().c_str(), name.c_str(), static_cast<long long>(a.rows),
                  static_cast<long long>(a.cols), static_cast<long long>(r->matrices),
                  r->best_gbps, r->device_gbps, share);
    else
      std::printf("| %s | %lld x %lld | %lld | %.0f | %.1f | %.0f%% |\n", name.c_str(),
                  static_cast<long long>(a.rows), static_cast<long long>(a.cols),
                  static_cast<long long>(r->matrices), r->bytes / 1048576.0, r->best_gbps,
                  100 * share);
  }
  return rc;
}

}  // namespace
}  // namespace hc

int main(int argc, char** argv) { return hc::run(std::vector<std::string>(argv + 1, argv + argc)); }
