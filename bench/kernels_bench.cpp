// hc-kernel-bench: Google Benchmark microbenchmarks of every CPU kernel, each reporting the
// bytes it reads as bytes_per_second (GiB/s) and a "GB/s" counter (1e9 bytes/s), comparable
// with `hotcold bench --membw`. Families (filter with --benchmark_filter=REGEX):
//   vec_dot/TYPE/ISA            one 4096-element weight row . activations (L1-resident: the
//                               compute ceiling of each kernel table); bytes = weight row bytes
//   vec_dot4/TYPE/ISA           four rows at once, where a table has that kernel
//   matvec/TYPE/RxC/threads:T   hc::ops::matmul with n_tok = 1 on an R x C weight (R outputs,
//                               C inputs), cycling through copies spanning 256 MiB so weights
//                               come from DRAM; bytes = weight bytes, so GB/s compares with
//                               the measured read bandwidth: this is batch-1 decode
//   matmul/TYPE/RxC/tok:N/threads:T   the same with N tokens (prefill); GFLOP/s and tok/s
//   decode_steps/TYPE[-bs]/RxC/tok:N  N independent decode steps (kPerToken) against an
//                                     L2-resident matrix in the decode layout (-bs: block sums)
//   quantize_act/TYPE, rmsnorm, rope, softmax, swiglu, attention: the per-token ops
//   attention_cold/...          attention over 2048 caches in turn (a serving decode step's
//                               cold KV rows, read from DRAM)
//   membw/KERNEL/...            the STREAM-like probe's kernels (src/ops/cpu/membw.h)
// Weights are random floats quantised with hc::quant::quantize_row.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/ops.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace hc {
namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                 GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

using bench::pool_of;
using bench::random_floats;
using bench::report_bytes;

// Weight matrices [rows, cols] of type t: `copies` back-to-back copies, enough to span at least
// kColdBytes, so that a benchmark cycling through them reads every weight from DRAM as decode
// does (one 4096 x 11008 Q4_0 matrix, 25 MB, would otherwise stay in the 32 MiB L3).
// Quantising tens of millions of K-quant elements takes long, so 64 distinct random rows are
// quantised and repeated: every byte still lives at its own address, which is all the memory
// system sees. Only the latest set is kept (benchmarks of one shape run one after another).
constexpr int64_t kColdBytes = int64_t{256} << 20;

struct WeightSet {
  GgmlType t = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  int64_t matrix_bytes = 0;
  int copies = 0;
  std::vector<uint8_t> bytes;  // [copies][rows][row_bytes(t, cols)]
  const uint8_t* copy(int64_t i) const { return bytes.data() + (i % copies) * matrix_bytes; }
};

const WeightSet& weights(GgmlType t, int64_t rows, int64_t cols) {
  static WeightSet set;
  if (set.t == t && set.rows == rows && set.cols == cols && !set.bytes.empty()) return set;
  set.bytes.clear();
  set.bytes.shrink_to_fit();
  const int64_t rb = row_bytes(t, cols);
  const int64_t distinct = std::min<int64_t>(rows, 64);
  set.t = t;
  set.rows = rows;
  set.cols = cols;
  set.matrix_bytes = rb * rows;
  set.copies = static_cast<int>(std::max<int64_t>(1, (kColdBytes + set.matrix_bytes - 1) / set.matrix_bytes));
  const int64_t total_rows = rows * set.copies;
  const std::vector<float> src = random_floats(distinct * cols, 42);
  set.bytes.resize(static_cast<size_t>(rb * total_rows));
  for (int64_t r = 0; r < distinct; ++r)
    quant::quantize_row(t, src.data() + r * cols, set.bytes.data() + r * rb, cols);
  for (int64_t r = distinct; r < total_rows; ++r)
    std::memcpy(set.bytes.data() + r * rb, set.bytes.data() + (r % distinct) * rb, rb);
  return set;
}

// --- quant dot products, per kernel table ----------------------------------------------------

void bm_vec_dot(benchmark::State& state, GgmlType t, quant::VecDotFn dot) {
  constexpr int64_t n = 4096;
  const GgmlType vt = quant::vec_dot_type(t);
  std::vector<uint8_t> w(row_bytes(t, n)), a(row_bytes(vt, n));
  const auto wf = random_floats(n, 1), af = random_floats(n, 2);
  quant::quantize_row(t, wf.data(), w.data(), n);
  quant::quantize_activations(vt, af.data(), a.data(), n);
  for (auto _ : state) {
    float s = dot(n, w.data(), a.data());
    benchmark::DoNotOptimize(s);
  }
  report_bytes(state, static_cast<double>(w.size()));
}

// Four rows at once (the matvec kernel where a table has one); bytes = four weight rows.
void bm_vec_dot4(benchmark::State& state, GgmlType t, quant::VecDot4Fn dot4) {
  constexpr int64_t n = 4096;
  const GgmlType vt = quant::vec_dot_type(t);
  const int64_t rb = row_bytes(t, n);
  std::vector<uint8_t> w(4 * rb), a(row_bytes(vt, n));
  const auto wf = random_floats(4 * n, 1), af = random_floats(n, 2);
  for (int r = 0; r < 4; ++r) quant::quantize_row(t, wf.data() + r * n, w.data() + r * rb, n);
  quant::quantize_activations(vt, af.data(), a.data(), n);
  float out[4];
  for (auto _ : state) {
    dot4(n, w.data(), rb, a.data(), out);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  report_bytes(state, static_cast<double>(w.size()));
}

void register_vec_dot() {
  for (GgmlType t : kWeightTypes) {
    const std::string type = dtype_name(t);
    struct Table {
      const char* isa;
      const quant::TypeKernels* k;
    };
    std::vector<Table> tables;
    if (const quant::TypeKernels* ref = quant::ref_kernels(t)) tables.push_back({"ref", ref});
    if (const quant::IsaKernels* k = quant::avx2_kernels()) tables.push_back({"avx2", &k->types[quant::type_slot(t)]});
    if (const quant::IsaKernels* k = quant::avx512_kernels())
      tables.push_back({"avx512", &k->types[quant::type_slot(t)]});
    for (const Table& tb : tables) {  // nullptr: nothing faster than the table below
      if (quant::VecDotFn fn = tb.k->vec_dot)
        benchmark::RegisterBenchmark(("vec_dot/" + type + "/" + tb.isa).c_str(),
                                     [t, fn](benchmark::State& s) { bm_vec_dot(s, t, fn); })
            ->UseRealTime();
      if (quant::VecDot4Fn fn4 = tb.k->vec_dot4)
        benchmark::RegisterBenchmark(("vec_dot4/" + type + "/" + tb.isa).c_str(),
                                     [t, fn4](benchmark::State& s) { bm_vec_dot4(s, t, fn4); })
            ->UseRealTime();
    }
  }
}

// --- matmul: matrix-vector (decode) and matrix-matrix (prefill) -------------------------------

// GFLOP/s and tokens/s of a rows x cols matrix times n_tok tokens per iteration.
void report_flops(benchmark::State& state, int64_t rows, int64_t cols, int64_t n_tok) {
  const double it = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n_tok * it / 1e9, benchmark::Counter::kIsRate);
  state.counters["tok/s"] = benchmark::Counter(n_tok * it, benchmark::Counter::kIsRate);
}

void bm_matmul(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, int64_t n_tok, int threads) {
  const WeightSet& w = weights(t, rows, cols);
  const std::vector<float> x = random_floats(n_tok * cols, 3);
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput scratch;
  int64_t i = 0;
  for (auto _ : state) {
    const TensorView wv = TensorView::make(t, w.copy(i++), cols, rows);  // a cold copy each time
    ops::matmul(wv, x.data(), n_tok, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, static_cast<double>(w.matrix_bytes));
  report_flops(state, rows, cols, n_tok);
}

// A prompt batch against weights in the decode layout (F16: the GEMM reads it in place as its
// panels; the quantised types pack their panels from it): one matrix, repacked once.
void bm_gemm_repacked(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, int64_t n_tok, int threads) {
  if (!ops::repack_available(t)) {
    state.SkipWithError("no decode layout on this CPU");
    return;
  }
  const WeightSet& w = weights(t, rows, cols);
  std::vector<uint8_t> packed(static_cast<size_t>(ops::repack_bytes(t, cols, rows) + 64));
  uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
  TensorView wv = TensorView::make(t, w.copy(0), cols, rows);
  ops::repack_groups(wv, 0, (rows + ops::kRepackRows - 1) / ops::kRepackRows, base);
  wv.packed = base;
  const std::vector<float> x = random_floats(n_tok * cols, 3);
  std::vector<float> y(static_cast<size_t>(n_tok * rows));
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput scratch;
  for (auto _ : state) {
    ops::matmul(wv, x.data(), n_tok, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_flops(state, rows, cols, n_tok);
}

// The decode layout (ops/cpu/repack.h): the same cold copies, each repacked once. `hot`: one
// small matrix (256 x 2048, L2-resident) over and over: the kernel's compute ceiling.
void bm_matvec_repacked(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, int threads, bool hot) {
  if (!ops::repack_available(t)) {
    state.SkipWithError("no decode-layout kernel on this CPU");
    return;
  }
  const WeightSet& w = weights(t, rows, cols);
  const int64_t pb = ops::repack_bytes(t, cols, rows);
  const int copies = hot ? 1 : w.copies;
  std::vector<uint8_t> packed(static_cast<size_t>(pb * copies + 64));
  uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
  const int64_t ng = (rows + ops::kRepackRows - 1) / ops::kRepackRows;
  for (int c = 0; c < copies; ++c)
    ops::repack_groups(TensorView::make(t, w.copy(c), cols, rows), 0, ng, base + c * pb);
  const std::vector<float> x = random_floats(cols, 3);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool& pool = pool_of(threads);
  ops::MatmulInput scratch;
  int64_t i = 0;
  for (auto _ : state) {
    TensorView wv = TensorView::make(t, w.copy(0), cols, rows);
    wv.packed = base + (i++ % copies) * pb;
    ops::matmul(wv, x.data(), 1, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, static_cast<double>(w.matrix_bytes));
}

// Decode steps of n_tok independent sequences against one L2-resident matrix in the decode
// layout (the server's batched decode: MatmulMode::kPerToken), optionally in block sums.
void bm_decode_steps(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols,
                     int64_t n_tok, bool block_sums, int threads = 1) {
  if (!ops::repack_available(t)) {
    state.SkipWithError("no decode-layout kernel on this CPU");
    return;
  }
  const WeightSet& w = weights(t, rows, cols);
  const int64_t pb = ops::repack_bytes(t, cols, rows);
  std::vector<uint8_t> packed(static_cast<size_t>(pb + 64));
  uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
  ops::repack_groups(TensorView::make(t, w.copy(0), cols, rows), 0,
                     (rows + ops::kRepackRows - 1) / ops::kRepackRows, base);
  TensorView wv = TensorView::make(t, w.copy(0), cols, rows);
  wv.packed = base;
  wv.block_sums = block_sums;
  const std::vector<float> x = random_floats(cols * n_tok, 3);
  std::vector<float> y(static_cast<size_t>(rows * n_tok));
  ops::MatmulInput in;
  in.set_mode(ops::MatmulMode::kPerToken);
  for (auto _ : state) {
    in.reset(x.data(), n_tok, cols);  // the activations are quantised in every step, as in decode
    ops::matmul(wv, in, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_flops(state, rows, cols, n_tok);
}

void register_matmul() {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K})
    for (int64_t n_tok : {1, 8, 32})
      for (bool bs : {false, true}) {
        if (bs && t != GgmlType::Q4_1 && t != GgmlType::Q8_0) continue;
        benchmark::RegisterBenchmark(("decode_steps/" + std::string(dtype_name(t)) + (bs ? "-bs" : "") +
                                      "/1024x2048/tok:" + std::to_string(n_tok) + "/threads:1").c_str(),
                                     [=](benchmark::State& s) { bm_decode_steps(s, t, 1024, 2048, n_tok, bs); })
            ->UseRealTime();
      }
  // The same at a 7B shape's FFN matrices (DRAM-sized for the whole model, L3-sized alone):
  // the rates the server's 32-slot decode pass could reach per matrix.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K})
    for (auto sh : {std::pair<int64_t, int64_t>{11008, 4096}, {4096, 11008}})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("decode_steps/" + std::string(dtype_name(t)) + "/" +
                                      std::to_string(sh.first) + "x" + std::to_string(sh.second) +
                                      "/tok:32/threads:" + std::to_string(threads)).c_str(),
                                     [=](benchmark::State& s) {
                                       bm_decode_steps(s, t, sh.first, sh.second, 32, false, threads);
                                     })
            ->UseRealTime();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::F16}) {
    benchmark::RegisterBenchmark(("matvec_repacked_hot/" + std::string(dtype_name(t)) + "/256x2048/threads:1").c_str(),
                                 [=](benchmark::State& s) { bm_matvec_repacked(s, t, 256, 2048, 1, true); })
        ->UseRealTime();
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark(("matvec_repacked/" + std::string(dtype_name(t)) + "/11008x4096/threads:" +
                                    std::to_string(threads)).c_str(),
                                   [=](benchmark::State& s) { bm_matvec_repacked(s, t, 11008, 4096, threads, false); })
          ->UseRealTime();
  }
  struct Shape {
    int64_t rows, cols;
  };
  // LLaMA-7B's attention projections, ffn_gate/ffn_up and ffn_down.
  const Shape matvec_shapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  for (const Shape& sh : matvec_shapes)
    for (GgmlType t : kWeightTypes)
      for (int threads : {1, 2}) {
        const std::string name = "matvec/" + std::string(dtype_name(t)) + "/" + std::to_string(sh.rows) + "x" +
                                 std::to_string(sh.cols) + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          bm_matmul(s, t, sh.rows, sh.cols, 1, threads);
        })->UseRealTime();
      }
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K})
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark(("gemm_repacked/" + std::string(dtype_name(t)) + "/4096x4096/tok:128/threads:" +
                                    std::to_string(threads)).c_str(),
                                   [=](benchmark::State& s) { bm_gemm_repacked(s, t, 4096, 4096, 128, threads); })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
  for (GgmlType t : kWeightTypes)
    for (int64_t n_tok : {64, 512})
      for (int threads : {1, 2}) {
        const std::string name = "matmul/" + std::string(dtype_name(t)) + "/4096x4096/tok:" +
                                 std::to_string(n_tok) + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          bm_matmul(s, t, 4096, 4096, n_tok, threads);
        })->UseRealTime()->Unit(benchmark::kMillisecond);
      }
}

// --- per-token ops ------------------------------------------------------------------------

void bm_quantize_act(benchmark::State& state, GgmlType vt, int64_t n) {
  const auto x = random_floats(n, 4);
  std::vector<uint8_t> q(row_bytes(vt, n));
  for (auto _ : state) {
    quant::quantize_activations(vt, x.data(), q.data(), n);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 4.0 * n);  // fp32 activations read
}

void bm_rmsnorm(benchmark::State& state, int64_t n) {
  const auto x = random_floats(n, 5), w = random_floats(n, 6);
  std::vector<float> out(n);
  for (auto _ : state) {
    ops::rmsnorm(out.data(), x.data(), w.data(), n, 1e-5f);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 3.0 * 4 * n);  // x and w read, out written
}

// RoPE of one token's query heads: the cache once per token, then every head rotated.
void bm_rope(benchmark::State& state, int n_head, int head_dim) {
  auto q = random_floats(int64_t{n_head} * head_dim, 7);
  std::vector<float> cs(head_dim);
  const float theta_scale = std::pow(10000.0f, -2.0f / head_dim);
  int64_t pos = 0;
  for (auto _ : state) {
    ops::rope_cache(cs.data(), head_dim, theta_scale, 1.0f, nullptr, pos++ & 4095);
    for (int h = 0; h < n_head; ++h) ops::rope_apply(q.data() + int64_t{h} * head_dim, head_dim, cs.data());
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * 4 * n_head * head_dim);
}

void bm_softmax(benchmark::State& state, int64_t n) {
  const auto x0 = random_floats(n, 8);
  std::vector<float> x(n);
  for (auto _ : state) {
    std::memcpy(x.data(), x0.data(), 4 * n);
    ops::softmax(x.data(), n);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * 4 * n);
}

void bm_swiglu(benchmark::State& state, int64_t n) {
  const auto g0 = random_floats(n, 9), up = random_floats(n, 10);
  std::vector<float> g(n);
  for (auto _ : state) {
    std::memcpy(g.data(), g0.data(), 4 * n);
    ops::swiglu(g.data(), up.data(), n);
    benchmark::DoNotOptimize(g.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 3.0 * 4 * n);
}

// One query token over n_kv cached positions, all heads on one thread; bytes = K and V read.
// n_caches > 1: that many separate caches of max(n_kv, 256) positions (a server's slots times
// layers), visited one after the other, the next one's rows prefetched as the decode step's
// loop does, so that each call finds its K and V rows in DRAM as a serving decode step does
// (the weights have streamed through the CPU caches since that cache's previous visit).
void bm_attention(benchmark::State& state, int n_head, int n_head_kv, int head_dim, int64_t n_kv,
                  int64_t n_caches = 1) {
  const int64_t n_ctx = n_caches == 1 ? n_kv : std::max<int64_t>(n_kv, 256);
  const int64_t kv_dim = int64_t{n_head_kv} * head_dim;
  const int64_t per = n_ctx * kv_dim;
  std::vector<fp16_t> k(per * n_caches), v_t(per * n_caches);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& e : k) e = fp32_to_fp16(d(rng));
  for (auto& e : v_t) e = fp32_to_fp16(d(rng));
  const auto q = random_floats(int64_t{n_head} * head_dim, 12);
  const int64_t n_kv_pad = ops::attention_kv_pad(n_kv);
  std::vector<float> out(int64_t{n_head} * head_dim), scratch(2 * n_kv_pad);
  ops::AttentionShape shape;
  shape.n_head = n_head;
  shape.n_head_kv = n_head_kv;
  shape.head_dim = head_dim;
  shape.k_stride = kv_dim;
  shape.v_stride = n_ctx;
  const ops::AttentionKernels kernels = ops::attention_kernels(1, head_dim, n_kv_pad);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  int64_t c = 0;
  for (auto _ : state) {
    const int64_t next = c + 1 == n_caches ? 0 : c + 1;
    if (n_caches > 1)
      ops::attention_prefetch(k.data() + next * per, v_t.data() + next * per, n_kv, shape, 0,
                              n_head_kv);
    ops::attention_one(q.data(), k.data() + c * per, v_t.data() + c * per, n_kv, n_kv_pad, shape,
                       scale, kernels, 0, n_head, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    c = next;
  }
  report_bytes(state, 2.0 * 2 * n_kv * kv_dim);
}

void register_ops() {
  for (GgmlType vt : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16})
    for (int64_t n : {4096, 11008})
      benchmark::RegisterBenchmark(("quantize_act/" + std::string(dtype_name(vt)) + "/" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { bm_quantize_act(s, vt, n); })
          ->UseRealTime();
  benchmark::RegisterBenchmark("rmsnorm/4096", [](benchmark::State& s) { bm_rmsnorm(s, 4096); })->UseRealTime();
  benchmark::RegisterBenchmark("rope/32x128", [](benchmark::State& s) { bm_rope(s, 32, 128); })->UseRealTime();
  for (int64_t n : {512, 4096})
    benchmark::RegisterBenchmark(("softmax/" + std::to_string(n)).c_str(),
                                 [=](benchmark::State& s) { bm_softmax(s, n); })
        ->UseRealTime();
  benchmark::RegisterBenchmark("swiglu/11008", [](benchmark::State& s) { bm_swiglu(s, 11008); })->UseRealTime();
  for (int64_t n_kv : {512, 2048})
    benchmark::RegisterBenchmark(("attention/32h_8kv_128d/n_kv:" + std::to_string(n_kv)).c_str(),
                                 [=](benchmark::State& s) { bm_attention(s, 32, 8, 128, n_kv); })
        ->UseRealTime();
  // A small GQA model's decode (head_dim 64): short rows, where each dot's reduction dominates.
  for (int64_t n_kv : {32, 256, 1024})
    benchmark::RegisterBenchmark(("attention/9h_3kv_64d/n_kv:" + std::to_string(n_kv)).c_str(),
                                 [=](benchmark::State& s) { bm_attention(s, 9, 3, 64, n_kv); })
        ->UseRealTime();
  // The same from DRAM: 2048 caches (384 MiB; the rows one call reads, 24-48 MiB in all, do
  // not stay in L3 until the next visit), as 32 slots x 30 layers of SmolLM2 serving.
  for (int64_t n_kv : {32, 64})
    benchmark::RegisterBenchmark(("attention_cold/9h_3kv_64d/n_kv:" + std::to_string(n_kv)).c_str(),
                                 [=](benchmark::State& s) { bm_attention(s, 9, 3, 64, n_kv, 2048); })
        ->UseRealTime();
}

// --- the bandwidth probe's kernels -----------------------------------------------------------

constexpr int64_t kMembwFloats = (int64_t{256} << 20) / 4;  // 256 MiB per array, >> LLC

// The probe's three arrays, touched once by the pool that uses them.
float* membw_array(int i) {
  static std::vector<float> arrays[3];
  if (arrays[i].empty()) arrays[i].assign(kMembwFloats, i == 1 ? 2.0f : i == 0 ? 1.0f : 0.0f);
  return arrays[i].data();
}

void bm_membw(benchmark::State& state, ops::MembwKernel k, int threads, ops::MembwReadFn read_fn) {
  ThreadPool& pool = pool_of(threads);
  float *a = membw_array(0), *b = membw_array(1), *c = membw_array(2);
  const int64_t n = kMembwFloats;
  for (auto _ : state) {
    switch (k) {
      case ops::MembwKernel::kRead: {
        double s = ops::membw_read(a, n, pool, read_fn);
        benchmark::DoNotOptimize(s);
        break;
      }
      case ops::MembwKernel::kCopy: ops::membw_copy(c, a, n, pool); break;
      case ops::MembwKernel::kScale: ops::membw_scale(b, c, 3.0f, n, pool); break;
      case ops::MembwKernel::kAdd: ops::membw_add(c, a, b, n, pool); break;
      case ops::MembwKernel::kTriad: ops::membw_triad(a, b, c, 3.0f, n, pool); break;
    }
    benchmark::ClobberMemory();
  }
  report_bytes(state, static_cast<double>(ops::membw_bytes_per_element(k)) * n);
}

void register_membw() {
  for (int threads : {1, 2}) {
    const std::string th = "/threads:" + std::to_string(threads);
    struct Read {
      const char* isa;
      ops::MembwReadFn fn;
    };
    for (const Read& r : {Read{"sse2", ops::membw_read_sse2()}, Read{"avx2", ops::membw_read_avx2()}}) {
      if (!r.fn) continue;
      benchmark::RegisterBenchmark(("membw/read/" + std::string(r.isa) + th).c_str(),
                                   [=, fn = r.fn](benchmark::State& s) {
                                     bm_membw(s, ops::MembwKernel::kRead, threads, fn);
                                   })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    for (ops::MembwKernel k : {ops::MembwKernel::kCopy, ops::MembwKernel::kScale, ops::MembwKernel::kAdd,
                               ops::MembwKernel::kTriad})
      benchmark::RegisterBenchmark(("membw/" + std::string(ops::membw_kernel_name(k)) + th).c_str(),
                                   [=](benchmark::State& s) { bm_membw(s, k, threads, nullptr); })
          ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

// vpdpbusd throughput with C independent accumulator chains (one 64-byte weight register, the
// activation broadcast from memory, as the GEMM's integer micro-kernel issues them): the
// ceiling the integer GEMM is measured against, and how many chains it takes to reach it.
// Counter: vpdpbusd instructions per second (64 multiply-adds each).
template <int C>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void bm_vnni_chains(benchmark::State& state) {
  if (std::strcmp(quant::isa_name(), "avx512") != 0) {
    state.SkipWithError("no AVX-512 VNNI on this CPU (or HOTCOLD_ISA caps it)");
    return;
  }
  alignas(64) int32_t x[16 * C];
  for (int i = 0; i < 16 * C; ++i) x[i] = 0x01010101 * (i % 7);
  const __m512i w = _mm512_set1_epi8(3);
  __m512i acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_si512();
  constexpr int kSteps = 1024;
  for (auto _ : state) {
    for (int s = 0; s < kSteps; s += 4) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          acc[c] = _mm512_dpbusd_epi32(acc[c], w, _mm512_set1_epi32(x[j * C + c]));
      }
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["vpdpbusd/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSteps * C, benchmark::Counter::kIsRate);
}

void register_vnni() {
  benchmark::RegisterBenchmark("vnni_chains/8", bm_vnni_chains<8>);
  benchmark::RegisterBenchmark("vnni_chains/12", bm_vnni_chains<12>);
  benchmark::RegisterBenchmark("vnni_chains/16", bm_vnni_chains<16>);
}

}  // namespace
}  // namespace hc

int main(int argc, char** argv) {
  hc::register_vnni();
  hc::register_vec_dot();
  hc::register_matmul();
  hc::register_ops();
  hc::register_membw();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", hc::quant::isa_name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
