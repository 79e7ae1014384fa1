// hc-ggml-kernel-bench: hotcold's batch-1 decode product against ggml's on the same matrix, in
// one process, interleaved with a plain read of memory (issue 41 item 2). Built only when
// CMake is given -DHC_GGML_DIR (ggml's static libraries and headers, kept by
// scripts/build_llama_cpp.sh); bench/ggml_kernel_compare.sh does both and runs it.
//
//   hc-ggml-kernel-bench [--types q4_K,q5_K,q6_K,f16,q4_0,q8_0] [--rows 11008] [--cols 4096]
//                        [--threads 1,2] [--rounds 9] [--ms 60] [--cold-mib 256] [--json]
//
// Per type: random floats quantised by ggml (ggml_quantize_chunk), copies of the matrix
// spanning --cold-mib so every product reads its weights from DRAM as decode does. The same
// bytes feed both engines:
//   hotcold  ops::matmul with one token (the decode path: the activation quantised, then the
//            decode layout of repack.h where the type has one, the row kernels otherwise);
//   ggml     a MUL_MAT graph on ggml's CPU backend (from_float of the activation, then the
//            repacked GEMV where ggml repacks the type on this CPU, vec_dot otherwise), the
//            weights in ggml's CPU_REPACK buffer when it supports them, as llama.cpp loads them;
//   reads    a plain read of each engine's own copies of the weight (the same bytes count), so
//            each engine's figure has the speed of the memory it was given beside it: on a
//            host whose pages differ in speed, a difference there is not the kernel's.
// Each round runs every variant for --ms milliseconds, the order rotating between rounds, so
// a host whose bandwidth moves from minute to minute moves all four alike. GB/s counts the
// file's bytes of the matrix (ggml's row bytes x rows) for both engines. Printed per type and
// thread count: medians [ranges] and the per-round ratios hotcold / ggml; the two engines'
// outputs are compared (relative L2 difference) so the figures are for the same product.
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/repack.h"

namespace hc {
namespace {

struct TypeName {
  const char* name;
  ggml_type g;
  GgmlType h;
};
const TypeName kTypes[] = {
    {"q4_0", GGML_TYPE_Q4_0, GgmlType::Q4_0}, {"q4_1", GGML_TYPE_Q4_1, GgmlType::Q4_1},
    {"q8_0", GGML_TYPE_Q8_0, GgmlType::Q8_0}, {"q4_K", GGML_TYPE_Q4_K, GgmlType::Q4_K},
    {"q5_K", GGML_TYPE_Q5_K, GgmlType::Q5_K}, {"q6_K", GGML_TYPE_Q6_K, GgmlType::Q6_K},
    {"f16", GGML_TYPE_F16, GgmlType::F16},
};

struct Options {
  std::vector<const TypeName*> types;
  std::vector<int> threads{1, 2};
  int64_t rows = 11008, cols = 4096;
  int rounds = 9;
  int ms = 60;
  int64_t cold_mib = 256;
  bool json = false;
  bool no_huge = false;  // --no-huge: hotcold's layout without MADV_HUGEPAGE
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(
      stderr,
      "hc-ggml-kernel-bench: error: %s\n"
      "usage: hc-ggml-kernel-bench [--types q4_K,q5_K,q6_K,f16,q4_0,q8_0] [--rows N] "
      "[--cols N] [--threads 1,2] [--rounds N] [--ms N] [--cold-mib N] [--no-huge] [--json]\n",
      msg.c_str());
  std::exit(2);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = s.find(',', p);
    out.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

int64_t parse_int(const std::string& flag, const char* v, int64_t lo) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || x < lo)
    usage_error(flag + " expects an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string types = "q4_K,q5_K,q6_K,f16,q4_0,q8_0";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-huge") {
      o.no_huge = true;
      continue;
    }
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc) usage_error("unknown flag or missing value: '" + a + "'");
    const char* v = argv[++i];
    if (a == "--types")
      types = v;
    else if (a == "--rows")
      o.rows = parse_int(a, v, 16);
    else if (a == "--cols")
      o.cols = parse_int(a, v, 256);
    else if (a == "--rounds")
      o.rounds = static_cast<int>(parse_int(a, v, 1));
    else if (a == "--ms")
      o.ms = static_cast<int>(parse_int(a, v, 1));
    else if (a == "--cold-mib")
      o.cold_mib = parse_int(a, v, 1);
    else if (a == "--threads") {
      o.threads.clear();
      for (const std::string& t : split_commas(v))
        o.threads.push_back(static_cast<int>(parse_int(a, t.c_str(), 1)));
    } else
      usage_error("unknown flag '" + a + "'");
  }
  if (o.cols % 256 != 0) usage_error("--cols must be a multiple of 256 (the K-quants' block)");
  for (const std::string& t : split_commas(types)) {
    const TypeName* found = nullptr;
    for (const TypeName& k : kTypes)
      if (t == k.name) found = &k;
    if (!found)
      usage_error("unknown type '" + t + "' (expected q4_0, q4_1, q8_0, q4_K, q5_K, q6_K or f16)");
    o.types.push_back(found);
  }
  return o;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The matrix in ggml's blocks, `copies` times over: every copy its own addresses. Rows of 64
// distinct random vectors, quantised once and repeated (quantising tens of millions of K-quant
// elements takes long; the memory system sees distinct addresses all the same).
struct Weights {
  int64_t row_bytes = 0, matrix_bytes = 0;
  int copies = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* copy(int i) const { return bytes.data() + static_cast<int64_t>(i) * matrix_bytes; }
};

Weights make_weights(const TypeName& t, int64_t rows, int64_t cols, int64_t cold_bytes) {
  Weights w;
  w.row_bytes = static_cast<int64_t>(ggml_row_size(t.g, cols));
  w.matrix_bytes = w.row_bytes * rows;
  w.copies =
      static_cast<int>(std::max<int64_t>(2, (cold_bytes + w.matrix_bytes - 1) / w.matrix_bytes));
  const int64_t distinct = std::min<int64_t>(rows, 64);
  std::vector<float> src(static_cast<size_t>(distinct * cols));
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& f : src) f = nd(rng);
  std::vector<uint8_t> q(static_cast<size_t>(distinct * w.row_bytes));
  ggml_quantize_chunk(t.g, src.data(), q.data(), 0, distinct, cols, nullptr);
  w.bytes.resize(static_cast<size_t>(w.matrix_bytes * w.copies));
  for (int64_t r = 0; r < rows * w.copies; ++r)
    std::memcpy(w.bytes.data() + r * w.row_bytes, q.data() + (r % distinct) * w.row_bytes,
                static_cast<size_t>(w.row_bytes));
  return w;
}

// hotcold's side: each copy in the decode layout when the type has one here.
struct HcSide {
  GgmlType t;
  int64_t rows, cols;
  // The layout in anonymous memory advised for huge pages, as LlamaModel::repack_group maps it.
  struct Unmap {
    size_t n;
    void operator()(uint8_t* p) const { munmap(p, n); }
  };
  std::unique_ptr<uint8_t, Unmap> packed{nullptr, Unmap{0}};
  uint8_t* base = nullptr;
  int64_t pb = 0;
  const Weights* w = nullptr;
  ops::MatmulInput scratch;
  const uint8_t* bytes(int c) const { return base ? base + c * pb : w->copy(c); }
  TensorView view(int c) const {
    TensorView v = TensorView::make(t, w->copy(c), cols, rows);
    if (base) v.packed = base + c * pb;
    return v;
  }
};

void init_hc(HcSide& h, const TypeName& t, const Weights& w, int64_t rows, int64_t cols,
             bool no_huge) {
  h.t = t.h;
  h.rows = rows;
  h.cols = cols;
  h.w = &w;
  if (!ops::repack_available(t.h)) return;
  h.pb = ops::repack_bytes(t.h, cols, rows);
  const size_t bytes = static_cast<size_t>(h.pb * w.copies);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "hc-ggml-kernel-bench: error: cannot map %zu bytes\n", bytes);
    std::exit(1);
  }
  if (!no_huge) madvise(mem, bytes, MADV_HUGEPAGE);
  h.packed =
      std::unique_ptr<uint8_t, HcSide::Unmap>(static_cast<uint8_t*>(mem), HcSide::Unmap{bytes});
  h.base = h.packed.get();
  const int64_t ng = (rows + ops::kRepackRows - 1) / ops::kRepackRows;
  for (int c = 0; c < w.copies; ++c)
    ops::repack_groups(TensorView::make(t.h, w.copy(c), cols, rows), 0, ng, h.base + c * h.pb);
}

// ggml's side: one MUL_MAT graph per copy.
struct GgmlSide {
  ggml_context* ctx_w = nullptr;
  ggml_context* ctx_c = nullptr;
  ggml_backend_buffer_t buf_w = nullptr, buf_c = nullptr;
  ggml_backend_t backend = nullptr;
  ggml_tensor* x = nullptr;
  std::vector<ggml_tensor*> w;  // the copies of the weight, in buf_w
  std::vector<ggml_tensor*> out;
  std::vector<ggml_cgraph*> graphs;
  bool repacked = false;
  ~GgmlSide() {
    if (buf_w) ggml_backend_buffer_free(buf_w);
    if (buf_c) ggml_backend_buffer_free(buf_c);
    if (ctx_w) ggml_free(ctx_w);
    if (ctx_c) ggml_free(ctx_c);
    if (backend) ggml_backend_free(backend);
  }
};

// ggml's CPU_REPACK buffer type, or nullptr when this build has none.
ggml_backend_buffer_type_t repack_buft(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  auto get = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
  if (!get) return nullptr;
  for (ggml_backend_buffer_type_t* b = get(dev); b && *b; ++b)
    if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
  return nullptr;
}

// Allocates W's copies in buft and builds the graphs; false when the CPU device would not run
// the product with W in that buffer (ggml does not repack the type on this CPU).
bool build_ggml(GgmlSide& g, const TypeName& t, const Weights& w, int64_t rows, int64_t cols,
                ggml_backend_buffer_type_t buft, ggml_backend_dev_t dev) {
  const size_t n = static_cast<size_t>(w.copies);
  ggml_init_params pw{ggml_tensor_overhead() * (n + 1), nullptr, true};
  g.ctx_w = ggml_init(pw);
  std::vector<ggml_tensor*> ws;
  for (size_t c = 0; c < n; ++c) ws.push_back(ggml_new_tensor_2d(g.ctx_w, t.g, cols, rows));
  g.w = ws;
  g.buf_w = ggml_backend_alloc_ctx_tensors_from_buft(g.ctx_w, buft);
  if (!g.buf_w) return false;
  ggml_backend_buffer_set_usage(g.buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  ggml_init_params pc{ggml_tensor_overhead() * (2 * n + 2) + ggml_graph_overhead() * n, nullptr,
                      true};
  g.ctx_c = ggml_init(pc);
  g.x = ggml_new_tensor_1d(g.ctx_c, GGML_TYPE_F32, cols);
  for (size_t c = 0; c < n; ++c) g.out.push_back(ggml_mul_mat(g.ctx_c, ws[c], g.x));
  if (!ggml_backend_dev_supports_op(dev, g.out[0])) return false;
  for (size_t c = 0; c < n; ++c) {
    ggml_cgraph* gf = ggml_new_graph(g.ctx_c);
    ggml_build_forward_expand(gf, g.out[c]);
    g.graphs.push_back(gf);
  }
  g.buf_c = ggml_backend_alloc_ctx_tensors(g.ctx_c, g.backend);
  for (size_t c = 0; c < n; ++c)
    ggml_backend_tensor_set(ws[c], w.copy(static_cast<int>(c)), 0,
                            static_cast<size_t>(w.matrix_bytes));
  return true;
}

struct Rounds {
  std::vector<double> hc, gg, rh, rg, ratio;  // GB/s: engines, reads of their copies
  double rel_diff = 0;
};

// Runs fn(i) for at least ms milliseconds (and 4 calls); returns seconds per call.
template <class F>
double timed(int ms, F&& fn) {
  fn(0);  // warm the code and the first copy's TLB entries
  const double t0 = now_s();
  int i = 1;
  double t = 0;
  do {
    fn(i++);
    t = now_s() - t0;
  } while (t < ms * 1e-3 || i < 5);
  return t / (i - 1);
}

// The share of [p, p + n) backed by transparent huge pages (/proc/self/smaps: AnonHugePages over
// Rss of the mappings it overlaps), -1 when unknown. With 4 KiB pages a stream takes a TLB miss
// every 4 KiB and the hardware prefetchers stop at every page.
double huge_share(const void* p, int64_t n) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + static_cast<uintptr_t>(n);
  char line[512];
  bool in = false;
  double rss = 0, huge = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2 &&
        std::strchr(line, '-') < std::strchr(line, ' ')) {
      in = a < hi && b > lo;
      continue;
    }
    unsigned long kb = 0;
    if (in && std::sscanf(line, "Rss: %lu kB", &kb) == 1) rss += static_cast<double>(kb);
    if (in && std::sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) huge += static_cast<double>(kb);
  }
  std::fclose(f);
  return rss > 0 ? huge / rss : -1;
}

// A plain read of n bytes at p split over the pool's threads (integer ORs: any bytes, and no
// float assists on the weights' bit patterns).
__attribute__((target("avx2"))) uint64_t read_part(const uint8_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_or_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_or_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_or_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_or_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
  uint64_t out = static_cast<uint64_t>(_mm256_extract_epi64(a, 0) | _mm256_extract_epi64(a, 3));
  for (; i < n; ++i) out |= p[i];
  return out;
}

uint64_t read_bytes(const uint8_t* p, int64_t n, ThreadPool& pool) {
  std::vector<uint64_t> part(static_cast<size_t>(pool.size()), 0);
  pool.run([&](int ith, int nth) {
    const int64_t a = n * ith / nth / 64 * 64,
                  b = ith == nth - 1 ? n : n * (ith + 1) / nth / 64 * 64;
    part[static_cast<size_t>(ith)] = read_part(p + a, b - a);
  });
  uint64_t r = 0;
  for (uint64_t v : part) r |= v;
  return r;
}

void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }

}  // namespace
}  // namespace hc

int main(int argc, char** argv) {
  using namespace hc;
  const Options o = parse(argc, argv);
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) {
    std::fprintf(stderr, "hc-ggml-kernel-bench: error: ggml has no CPU device\n");
    return 1;
  }
  ggml_backend_buffer_type_t rb = repack_buft(dev);
  const int64_t cold = o.cold_mib << 20;
  if (!o.json)
    std::printf(
        "| type | threads | layouts (hotcold / ggml) | hotcold GB/s | ggml GB/s | "
        "read of hotcold's copies | read of ggml's | hotcold / ggml per round | "
        "hotcold / its read | ggml / its read | huge pages (hotcold / ggml) | rel. diff |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  else
    std::printf("[\n");
  bool first = true;
  uint64_t sink = 0;  // the reads' results, so they are not optimised away
  for (const TypeName* tn : o.types) {
    std::fprintf(stderr, "[%s] quantising %lld x %lld ...\n", tn->name,
                 static_cast<long long>(o.rows), static_cast<long long>(o.cols));
    const Weights w = make_weights(*tn, o.rows, o.cols, cold);
    HcSide h;
    init_hc(h, *tn, w, o.rows, o.cols, o.no_huge);
    auto make_side = [&](ggml_backend_buffer_type_t buft) {
      auto side = std::make_unique<GgmlSide>();
      side->backend = ggml_backend_cpu_init();
      if (!build_ggml(*side, *tn, w, o.rows, o.cols, buft, dev)) side.reset();
      return side;
    };
    std::unique_ptr<GgmlSide> gp = rb ? make_side(rb) : nullptr;
    const bool repacked = gp != nullptr;
    if (!gp) gp = make_side(ggml_backend_cpu_buffer_type());
    if (!gp) {
      std::fprintf(stderr, "hc-ggml-kernel-bench: error: ggml's CPU device refuses MUL_MAT of %s\n",
                   tn->name);
      return 1;
    }
    GgmlSide& g = *gp;
    g.repacked = repacked;
    std::vector<float> x(static_cast<size_t>(o.cols));
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& f : x) f = nd(rng);
    ggml_backend_tensor_set(g.x, x.data(), 0, x.size() * sizeof(float));
    std::vector<float> yh(static_cast<size_t>(o.rows)), yg(static_cast<size_t>(o.rows));
    for (int th : o.threads) {
      ThreadPool pool(th);
      ggml_backend_cpu_set_n_threads(g.backend, th);
      // Same product: compare copy 0's outputs.
      ops::matmul(h.view(0), x.data(), 1, yh.data(), pool, h.scratch);
      ggml_backend_graph_compute(g.backend, g.graphs[0]);
      ggml_backend_tensor_get(g.out[0], yg.data(), 0, yg.size() * sizeof(float));
      double num = 0, den = 0;
      for (int64_t r = 0; r < o.rows; ++r) {
        num += (yh[r] - yg[r]) * double(yh[r] - yg[r]);
        den += double(yg[r]) * yg[r];
      }
      Rounds res;
      res.rel_diff = std::sqrt(num / std::max(den, 1e-30));
      std::fprintf(stderr, "[%s] %d thread(s): %d rounds ...\n", tn->name, th, o.rounds);
      const double gb = static_cast<double>(w.matrix_bytes) / 1e9;
      for (int r = 0; r < o.rounds; ++r) {
        double s[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4; ++k) {
          const int v = (k + r) % 4;
          settle();
          if (v == 0)
            s[0] = timed(o.ms, [&](int i) {
              ops::matmul(h.view(i % w.copies), x.data(), 1, yh.data(), pool, h.scratch);
            });
          else if (v == 1)
            s[1] = timed(o.ms, [&](int i) {
              ggml_backend_graph_compute(g.backend, g.graphs[i % w.copies]);
            });
          else if (v == 2)
            s[2] = timed(o.ms, [&](int i) {
              sink |= read_bytes(h.bytes(i % w.copies), w.matrix_bytes, pool);
            });
          else
            s[3] = timed(o.ms, [&](int i) {
              sink |= read_bytes(static_cast<const uint8_t*>(g.w[i % w.copies]->data),
                                 w.matrix_bytes, pool);
            });
        }
        res.hc.push_back(gb / s[0]);
        res.gg.push_back(gb / s[1]);
        res.rh.push_back(gb / s[2]);
        res.rg.push_back(gb / s[3]);
        res.ratio.push_back(s[1] / s[0]);
      }
      auto rng_of = [](const std::vector<double>& v) {
        return std::make_pair(*std::min_element(v.begin(), v.end()),
                              *std::max_element(v.begin(), v.end()));
      };
      const double mh = median(res.hc), mg = median(res.gg), mrh = median(res.rh),
                   mrg = median(res.rg), mq = median(res.ratio);
      const auto [hl, hh] = rng_of(res.hc);
      const auto [gl, gh] = rng_of(res.gg);
      const auto [rhl, rhh] = rng_of(res.rh);
      const auto [rgl, rgh] = rng_of(res.rg);
      const auto [ql, qh] = rng_of(res.ratio);
      std::vector<double> hs, gs;  // each engine against a read of its own copies, per round
      for (size_t i = 0; i < res.hc.size(); ++i) {
        hs.push_back(res.hc[i] / res.rh[i]);
        gs.push_back(res.gg[i] / res.rg[i]);
      }
      const int64_t span = static_cast<int64_t>(w.copies) * (h.base ? h.pb : w.matrix_bytes);
      const double hp_h = huge_share(h.bytes(0), span);
      const double hp_g = huge_share(g.w[0]->data, w.copies * w.matrix_bytes);
      const char* hl_name = h.base ? "decode layout" : "rows";
      const char* gl_name = g.repacked ? "repacked" : "rows";
      if (o.json) {
        std::printf(
            "%s  {\"type\": \"%s\", \"threads\": %d, \"rows\": %lld, \"cols\": %lld, "
            "\"hotcold_layout\": \"%s\", \"ggml_layout\": \"%s\", \"hotcold_gbps\": %.2f, "
            "\"ggml_gbps\": %.2f, \"hotcold_copy_read_gbps\": %.2f, \"ggml_copy_read_gbps\": %.2f, "
            "\"ratio\": %.3f, \"ratio_min\": %.3f, \"ratio_max\": %.3f, "
            "\"hotcold_read_share\": %.3f, \"ggml_read_share\": %.3f, \"hotcold_huge_share\": "
            "%.2f, "
            "\"ggml_huge_share\": %.2f, \"rel_diff\": %.2e}",
            first ? "" : ",\n", tn->name, th, static_cast<long long>(o.rows),
            static_cast<long long>(o.cols), hl_name, gl_name, mh, mg, mrh, mrg, mq, ql, qh,
            median(hs), median(gs), hp_h, hp_g, res.rel_diff);
        first = false;
      } else {
        std::printf(
            "| %s | %d | %s / %s | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | "
            "%.1f [%.1f-%.1f] | **%.2fx** [%.2f-%.2f]%s | %.0f%% | %.0f%% | %.0f%% / %.0f%% | %.1e "
            "|\n",
            tn->name, th, hl_name, gl_name, mh, hl, hh, mg, gl, gh, mrh, rhl, rhh, mrg, rgl, rgh,
            mq, ql, qh, (ql < 1.0 && qh > 1.0) ? " crosses 1.0" : "", 100 * median(hs),
            100 * median(gs), 100 * hp_h, 100 * hp_g, res.rel_diff);
      }
      std::fflush(stdout);
    }
  }
  if (o.json) std::printf("\n]\n");
  return sink == 0x5a5a5a5a5a5a5a5aull ? 3 : 0;  // keeps the reads; never that value in practice
}
