// hc-ffn-bench: one token through one FFN layer, dense vs activation-sparse (docs/BENCHMARKS.md,
// "sparse FFN"), at Llama-2 7B / 13B / 70B FFN shapes:
//
//   ffn_dense/TYPE/EMBDxFF/threads:N            gate, up and down as decode runs them (the
//                                               decode layout where this CPU has its kernels)
//   ffn_sparse/TYPE/EMBDxFF/sparsity:P/...      a firing set of (100 - P)% of the neurons, as a
//                                               predictor gives it: gate and up rows over the
//                                               set (sparse_rows), SwiGLU, down over the set
//                                               (sparse_down on the transposed down matrix)
//   ffn_sparse_dense_gate/...                   exact-ReLU / threshold mode: every gate row,
//                                               then up and down over the set
//   ffn_predictor/EMBDxFF/rank:R/...            the predictor (fc2 . relu(fc1 . x), F16) that
//                                               would choose the set: its cost against the FFN
//
// Counters: GB/s of weight bytes actually read (for sparse: the selected rows only) and
// "bytes" per token. Firing sets are uniform random draws (16 different sets cycled), which is
// the worst case for locality; weights span >= 256 MiB of copies (cycled) so every byte comes
// from DRAM as in a real decode step, where the other layers evict this one from the caches.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/sparse.h"
#include "quant/quant.h"

namespace hc {
namespace {

constexpr int64_t kColdBytes = int64_t{256} << 20;

using bench::pool_of;
using bench::random_floats;

// Anonymous memory with transparent huge pages requested before it is touched, as the model
// keeps its repacked and transposed weights (a firing set's rows are scattered: with 4 KiB
// pages nearly every row is a TLB miss).
template <typename T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <typename U>
  HugeAlloc(const HugeAlloc<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    munmap(p, (n * sizeof(T) + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20));
  }
  bool operator==(const HugeAlloc&) const { return true; }
};
using Bytes = std::vector<uint8_t, HugeAlloc<uint8_t>>;

// 64 distinct random rows quantised to t, repeated to fill rows x copies (quantising hundreds
// of millions of K-quant elements would take minutes; the memory system sees distinct bytes).
Bytes random_matrix_bytes(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t rb = row_bytes(t, cols), distinct = std::min<int64_t>(rows, 64);
  const auto src = random_floats(distinct * cols, seed);
  Bytes b(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < distinct; ++r) quant::quantize_row(t, src.data() + r * cols, b.data() + r * rb, cols);
  for (int64_t r = distinct; r < rows; ++r) std::memcpy(b.data() + r * rb, b.data() + (r % distinct) * rb, rb);
  return b;
}

// One FFN layer's weights: [copies] x (gate, up [n_ff, n_embd], down [n_embd, n_ff]) and,
// for the sparse runs, down_t [n_ff, n_embd] of type ops::down_t_type(type); or the decode
// layout of gate/up/down for the dense runs. Only the latest set is kept.
struct FfnSet {
  GgmlType t = GgmlType::F32;
  int64_t n_embd = 0, n_ff = 0;
  bool dense = false;
  int copies = 0;
  std::vector<Bytes> gate, up, down, down_t, packed;  // per copy
  std::vector<TensorView> vgate, vup, vdown, vdown_t;
};

const FfnSet& ffn_set(GgmlType t, int64_t n_embd, int64_t n_ff, bool dense) {
  static FfnSet s;
  if (s.t == t && s.n_embd == n_embd && s.n_ff == n_ff && s.dense == dense && s.copies) return s;
  s = FfnSet{};
  s.t = t, s.n_embd = n_embd, s.n_ff = n_ff, s.dense = dense;
  const int64_t layer_bytes = 3 * row_bytes(t, n_embd) * n_ff;
  s.copies = static_cast<int>(std::max<int64_t>(1, (kColdBytes + layer_bytes - 1) / layer_bytes));
  for (int c = 0; c < s.copies; ++c) {
    s.gate.push_back(random_matrix_bytes(t, n_ff, n_embd, 100 + c));
    s.up.push_back(random_matrix_bytes(t, n_ff, n_embd, 200 + c));
    s.vgate.push_back(TensorView::make(t, s.gate.back().data(), n_embd, n_ff));
    s.vup.push_back(TensorView::make(t, s.up.back().data(), n_embd, n_ff));
    if (dense) {
      s.down.push_back(random_matrix_bytes(t, n_embd, n_ff, 300 + c));
      s.vdown.push_back(TensorView::make(t, s.down.back().data(), n_ff, n_embd));
      for (TensorView* v : {&s.vgate.back(), &s.vup.back(), &s.vdown.back()}) {
        if (!ops::repack_available(t)) continue;
        s.packed.emplace_back(static_cast<size_t>(ops::repack_bytes(t, v->ne0, v->ne1) + 64));
        uint8_t* base = s.packed.back().data();
        base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
        ops::repack_groups(*v, 0, (v->ne1 + ops::kRepackRows - 1) / ops::kRepackRows, base);
        v->packed = base;
      }
    } else {
      const GgmlType tt = ops::down_t_type(t);
      s.down_t.push_back(random_matrix_bytes(tt, n_ff, n_embd, 400 + c));
      s.vdown_t.push_back(TensorView::make(tt, s.down_t.back().data(), n_embd, n_ff));
    }
  }
  return s;
}

void report(benchmark::State& state, double bytes) {
  bench::report_bytes(state, bytes);
  state.counters["MB/token"] = bytes / 1e6;
}

void bm_dense(benchmark::State& state, GgmlType t, int64_t n_embd, int64_t n_ff, int threads) {
  const FfnSet& s = ffn_set(t, n_embd, n_ff, true);
  const auto x = random_floats(n_embd, 1);
  std::vector<float> g(n_ff), u(n_ff), y(n_embd);
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput in, hin;
  int64_t i = 0;
  for (auto _ : state) {
    const int c = static_cast<int>(i++ % s.copies);
    in.reset(x.data(), 1, n_embd);
    ops::matmul(s.vgate[c], in, g.data(), pool);
    ops::matmul(s.vup[c], in, u.data(), pool);
    ops::swiglu(g.data(), u.data(), n_ff);
    ops::matmul(s.vdown[c], g.data(), 1, y.data(), pool, hin);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report(state, 3.0 * static_cast<double>(row_bytes(t, n_embd) * n_ff));
}

void bm_sparse(benchmark::State& state, GgmlType t, int64_t n_embd, int64_t n_ff, int sparsity,
               bool dense_gate, int threads) {
  const FfnSet& s = ffn_set(t, n_embd, n_ff, false);
  const auto x = random_floats(n_embd, 1);
  const int64_t n_sel = std::max<int64_t>(1, n_ff * (100 - sparsity) / 100);
  std::vector<std::vector<int32_t>> sets(16);
  std::mt19937 rng(7);
  for (auto& set : sets) {
    set.resize(static_cast<size_t>(n_ff));
    std::iota(set.begin(), set.end(), 0);
    std::shuffle(set.begin(), set.end(), rng);
    set.resize(static_cast<size_t>(n_sel));
    std::sort(set.begin(), set.end());
  }
  std::vector<float> gfull(n_ff), g(n_sel), u(n_sel), y(n_embd);
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput in;
  int64_t i = 0;
  for (auto _ : state) {
    const int c = static_cast<int>(i % s.copies);
    const std::vector<int32_t>& set = sets[static_cast<size_t>(i++ % sets.size())];
    in.reset(x.data(), 1, n_embd);
    if (dense_gate) {
      ops::matmul(s.vgate[c], in, gfull.data(), pool);
      for (int64_t j = 0; j < n_sel; ++j) g[j] = gfull[set[j]];
    } else {
      ops::sparse_rows(s.vgate[c], in, set.data(), n_sel, g.data(), pool);
    }
    ops::sparse_rows(s.vup[c], in, set.data(), n_sel, u.data(), pool);
    ops::swiglu(g.data(), u.data(), n_sel);
    ops::sparse_down(s.vdown_t[c], set.data(), n_sel, g.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double row = static_cast<double>(row_bytes(t, n_embd));
  const double rowt = static_cast<double>(row_bytes(ops::down_t_type(t), n_embd));
  report(state, (dense_gate ? row * n_ff : row * n_sel) + row * n_sel + rowt * n_sel);
}

void bm_predictor(benchmark::State& state, int64_t n_embd, int64_t n_ff, int64_t rank, int threads) {
  const int copies = static_cast<int>(std::max<int64_t>(1, kColdBytes / ((n_embd + n_ff) * rank * 2)));
  std::vector<Bytes> b1, b2;
  std::vector<TensorView> fc1, fc2;
  for (int c = 0; c < copies; ++c) {
    b1.push_back(random_matrix_bytes(GgmlType::F16, rank, n_embd, 500 + c));
    b2.push_back(random_matrix_bytes(GgmlType::F16, n_ff, rank, 600 + c));
    fc1.push_back(TensorView::make(GgmlType::F16, b1.back().data(), n_embd, rank));
    fc2.push_back(TensorView::make(GgmlType::F16, b2.back().data(), rank, n_ff));
  }
  const auto x = random_floats(n_embd, 1);
  std::vector<float> hid(rank), logit(n_ff);
  std::vector<int32_t> set;
  set.reserve(n_ff);
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput in;
  int64_t i = 0;
  for (auto _ : state) {
    const int c = static_cast<int>(i++ % copies);
    ops::matmul(fc1[c], x.data(), 1, hid.data(), pool, in);
    for (float& h : hid) h = h > 0.0f ? h : 0.0f;
    ops::matmul(fc2[c], hid.data(), 1, logit.data(), pool, in);
    set.clear();
    for (int64_t j = 0; j < n_ff; ++j)
      if (logit[j] > 0.0f) set.push_back(static_cast<int32_t>(j));
    benchmark::DoNotOptimize(set.data());
    benchmark::ClobberMemory();
  }
  report(state, 2.0 * static_cast<double>((n_embd + n_ff) * rank));
}

struct Shape {
  const char* name;
  int64_t n_embd, n_ff;
};
const Shape kShapes[] = {{"7B", 4096, 11008}, {"13B", 5120, 13824}, {"70B", 8192, 28672}};

void register_all() {
  const GgmlType all[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                          GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                          GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  const GgmlType big[] = {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K};
  for (const Shape& sh : kShapes) {
    const bool is7b = sh.n_embd == 4096;
    const std::string dims = std::to_string(sh.n_embd) + "x" + std::to_string(sh.n_ff);
    const std::vector<GgmlType> types = is7b ? std::vector<GgmlType>(std::begin(all), std::end(all))
                                             : std::vector<GgmlType>(std::begin(big), std::end(big));
    for (GgmlType t : types) {
      const std::string base = std::string(dtype_name(t)) + "/" + dims;
      for (int threads : {1, 2}) {
        const std::string th = "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(("ffn_dense/" + base + th).c_str(), [=](benchmark::State& s) {
          bm_dense(s, t, sh.n_embd, sh.n_ff, threads);
        })->UseRealTime()->Unit(benchmark::kMicrosecond);
        for (int sp : {0, 50, 80, 90, 95}) {
          const std::string sps = "/sparsity:" + std::to_string(sp);
          benchmark::RegisterBenchmark(("ffn_sparse/" + base + sps + th).c_str(), [=](benchmark::State& s) {
            bm_sparse(s, t, sh.n_embd, sh.n_ff, sp, false, threads);
          })->UseRealTime()->Unit(benchmark::kMicrosecond);
          benchmark::RegisterBenchmark(("ffn_sparse_dense_gate/" + base + sps + th).c_str(), [=](benchmark::State& s) {
            bm_sparse(s, t, sh.n_embd, sh.n_ff, sp, true, threads);
          })->UseRealTime()->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (int64_t rank : {256, 512, 1024})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("ffn_predictor/" + dims + "/rank:" + std::to_string(rank) +
                                      "/threads:" + std::to_string(threads)).c_str(),
                                     [=](benchmark::State& s) { bm_predictor(s, sh.n_embd, sh.n_ff, rank, threads); })
            ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace hc

int main(int argc, char** argv) {
  hc::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", hc::quant::isa_name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
