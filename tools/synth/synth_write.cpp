// hc-synth-model: deterministic random values, derived tensors and the streamed file (synth.h).
// tensor (GgufWriter::serialize_header), so memory stays at one tensor however large the model.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/common.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "ops/cpu/matmul.h"
#include "quant/quant.h"
#include "synth.h"

namespace hc::synth {

// ---- random values -------------------------------------------------------------------------

// splitmix64's finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// n values of mean 0 and standard deviation `stddev` from the generator state `state`: each
// is the sum of four 16-bit uniforms of one splitmix64 draw, centred and scaled (Irwin-Hall,
// close to normal, bounded by 2*sqrt(3) standard deviations).
void fill_row(uint64_t state, float stddev, float* out, int64_t n) {
  const float scale = stddev * std::sqrt(3.0f) / 65536.0f;
  for (int64_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    const uint64_t r = mix64(state);
    const uint32_t sum = static_cast<uint32_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                                               ((r >> 32) & 0xFFFF) + (r >> 48));
    // sum + 2 is four (u + 0.5) uniforms on [0, 65536): mean 131072.
    out[i] = (static_cast<float>(sum) + 2.0f - 131072.0f) * scale;
  }
}

uint64_t tensor_seed(const std::string& name, uint64_t seed) {
  return mix64(seed ^ mix64(fnv1a(name)));
}

// Row r of a tensor seeded `seed` (tensor_seed): mean + the random values, or `mean` alone.
void draw_row(uint64_t seed, int64_t r, float stddev, float mean, float* out, int64_t n) {
  if (stddev <= 0) {
    std::fill(out, out + n, mean);
    return;
  }
  fill_row(mix64(seed + static_cast<uint64_t>(r)), stddev, out, n);
  if (mean != 0.0f)
    for (int64_t i = 0; i < n; ++i) out[i] += mean;
}

// ---- writing -------------------------------------------------------------------------------

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

Status write_bytes(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n)
    return Status::Error("write to '" + path + "' failed: " + std::strerror(errno));
  return Status::Ok();
}

// The transpose of tensor t.source ({ne[1], ne[0]}, drawn row by row as generate_tensor
// would), converted to t.type: rows of t are columns of the source, so the whole source is
// drawn first ([ne[0], ne[1]] floats: 180 MiB for a 7B ffn_down).
void generate_transposed(const TensorSpec& t, uint64_t seed, ThreadPool* pool,
                         std::vector<uint8_t>* buf) {
  const int64_t ne0 = t.ne[0], rows = t.ne[1];  // source: ne0 rows of `rows` values
  const int64_t rb = row_bytes(t.type, ne0);
  buf->resize(static_cast<size_t>(rb * rows));
  const uint64_t src_seed = tensor_seed(t.source, seed);
  std::vector<float> src(static_cast<size_t>(ne0 * rows));  // [ne0, rows] row-major
  pool->run([&](int ith, int nth) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(ne0, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      draw_row(src_seed, r, t.stddev, t.mean, src.data() + r * rows, rows);
  });
  pool->run([&](int ith, int nth) {
    std::vector<float> row(static_cast<size_t>(ne0));  // [ne0]: column r of the source
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < ne0; ++j) row[j] = src[j * rows + r];
      quant::quantize_row(t.type, row.data(), buf->data() + r * rb, ne0);
    }
  });
}

// Row r of a gate predictor's fc1 or fc2 (Derived::kPredFc1 / kPredFc2 / kPredFc1Ln /
// kPredFc2Ln), t.ne[0] values; norm_w: the n_embd weights of the norm folded in.
void predictor_row(const TensorSpec& t, uint64_t src_seed, int64_t r, const float* norm_w,
                   float* row, std::vector<float>& g, std::vector<uint8_t>& q) {
  const int64_t len = t.ne[0];
  std::fill(row, row + len, 0.0f);
  if (t.derived == Derived::kPredFc1 || t.derived == Derived::kPredFc1Ln) {
    const int64_t n = len;  // n_embd values per row: e_r w_r, then -e_r w_r (then the mean rows)
    if (r < 2 * n)
      row[r % n] = r < n ? norm_w[r] : -norm_w[r - n];
    else if (r == 2 * n || r == 2 * n + t.pred_block)
      std::fill(row, row + n, (r == 2 * n ? 1.0f : -1.0f) / static_cast<float>(n));
    return;
  }
  const int64_t n = (len - 2 * t.pred_block) / 2;  // n_embd (pred_block is 0 for kPredFc2)
  g.resize(static_cast<size_t>(n));  // the gate's (falcon: up's) row r as the file stores it
  q.resize(static_cast<size_t>(row_bytes(t.source_type, n)));
  draw_row(src_seed, r, t.stddev, t.mean, g.data(), n);
  quant::quantize_row(t.source_type, g.data(), q.data(), n);
  quant::dequantize_row(t.source_type, q.data(), g.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    row[j] = g[j];
    row[n + j] = -g[j];
  }
  if (t.derived == Derived::kPredFc2Ln) {  // -s against relu(mean), +s against relu(-mean)
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j]) * norm_w[j];
    row[2 * n] = static_cast<float>(-s);
    row[2 * n + t.pred_block] = static_cast<float>(s);
  }
}

// ---- a twin's low-rank gate and its exact predictor -----------------------------------------

std::vector<float> twin_gate_v(const std::string& gate, uint64_t seed, int64_t rank, int64_t n,
                               float stddev) {
  std::vector<float> v(static_cast<size_t>(rank * n));
  const uint64_t sv = tensor_seed(gate + ".v", seed);
  const int64_t ch = std::min<int64_t>(kTwinChannel, n);
  for (int64_t k = 0; k < rank; ++k) {
    float* row = v.data() + k * n;
    draw_row(sv, k, stddev, 0.0f, row, n);
    std::fill(row, row + ch, 0.0f);
  }
  return v;
}

void twin_gate_u(const std::string& gate, uint64_t seed, int64_t rank, int64_t row, float* u) {
  draw_row(tensor_seed(gate + ".u", seed), row, 1.0f / std::sqrt(static_cast<float>(rank)), 0.0f,
           u, rank);
}

// Rows [row0, row1) of a low-rank twin gate's values before its channel, U_r V (v:
// twin_gate_v), [row1 - row0, n] row-major: one F32 matmul (V^T as the weight, the U rows as
// its tokens; per element the same sum whatever the thread count), ~22 G multiply-adds for a
// 7B layer's gate at rank 496.
std::vector<float> low_rank_rows(const TensorSpec& t, uint64_t seed, const std::vector<float>& v,
                                 int64_t row0, int64_t row1, ThreadPool* pool) {
  const int64_t n = t.ne[0], rank = t.low_rank, rows = row1 - row0;
  std::vector<float> vt(static_cast<size_t>(n * rank)), u(static_cast<size_t>(rows * rank));
  for (int64_t k = 0; k < rank; ++k)
    for (int64_t j = 0; j < n; ++j) vt[static_cast<size_t>(j * rank + k)] = v[static_cast<size_t>(k * n + j)];
  for (int64_t r = 0; r < rows; ++r) twin_gate_u(t.name, seed, rank, row0 + r, u.data() + r * rank);
  std::vector<float> g(static_cast<size_t>(rows * n));
  ops::MatmulInput scratch;
  ops::matmul(TensorView::make(GgmlType::F32, vt.data(), rank, n), u.data(), rows, g.data(), *pool,
              scratch);
  return g;
}

// Row r of a twin predictor (Derived::kTwinFc1 / kTwinFc2; twin.h). fc1 reads the un-normed FFN
// input x: relu(V (w x)) - relu(-V (w x)) = V (w x), and the channel row's relu(w_c . x_c) is the
// channel's (positive) sum; fc2 row i weighs them with U_i and the bias a_i, so the logit is
// gate_i . (w x) = rms(x) x (gate_i . ffn_norm(x)) for the gate's values before quantisation.
void twin_predictor_row(const TensorSpec& t, uint64_t seed, const std::vector<float>& v,
                        const float* norm_w, int64_t r, float* row) {
  const int64_t len = t.ne[0], rank = t.low_rank;
  std::fill(row, row + len, 0.0f);
  if (t.derived == Derived::kTwinFc1) {
    if (r < 2 * rank) {
      const float* vk = v.data() + (r % rank) * len;
      const float sign = r < rank ? 1.0f : -1.0f;
      for (int64_t j = 0; j < len; ++j) row[j] = sign * vk[j] * norm_w[j];
    } else if (r == 2 * rank) {
      for (int64_t j = 0; j < std::min<int64_t>(kTwinChannel, len); ++j) row[j] = norm_w[j];
    }
    return;
  }
  twin_gate_u(t.source, seed, rank, r, row);
  for (int64_t k = 0; k < rank; ++k) row[rank + k] = -row[k];
  row[2 * rank] = (*t.channel_bias)[static_cast<size_t>(r)];
}

// Rows of a tensor: the product of ne[1..] (a 3-D expert tensor: n_expert x ne[1]).
int64_t n_rows(const TensorSpec& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
  return rows;
}

// Rows [row0, row1) of `t` drawn and converted to t.type in parallel (each thread owns a range
// of rows), into *buf: [row1 - row0, row_bytes] row-major. Derived tensors are generated whole.
void generate_tensor(const TensorSpec& t, uint64_t seed, ThreadPool* pool, int64_t row0,
                     int64_t row1, std::vector<uint8_t>* buf) {
  if (t.derived == Derived::kTranspose) return generate_transposed(t, seed, pool, buf);
  const int64_t ne0 = t.ne[0];
  const int64_t rows = row1 - row0;
  const int64_t rb = row_bytes(t.type, ne0);
  buf->resize(static_cast<size_t>(rb * rows));
  const bool twin_pred = t.derived == Derived::kTwinFc1 || t.derived == Derived::kTwinFc2;
  const bool pred = t.derived != Derived::kNone && !twin_pred;
  // A tensor with a source holds the source's values (predictors: derived from them; opt's
  // ffn_down_t.bias: a dense file's ffn_down.bias as it is).
  const uint64_t seed_t = tensor_seed(t.source.empty() ? t.name : t.source, seed);
  std::vector<float> norm_w;  // kPredFc1*: the source norm's n_embd weights; kPredFc2Ln: aux's
  if (t.derived == Derived::kPredFc1 || t.derived == Derived::kPredFc1Ln) {
    norm_w.resize(static_cast<size_t>(ne0));
    draw_row(seed_t, 0, t.stddev, t.mean, norm_w.data(), ne0);
  } else if (t.derived == Derived::kPredFc2Ln) {
    const int64_t n_embd = (ne0 - 2 * t.pred_block) / 2;
    norm_w.resize(static_cast<size_t>(n_embd));
    draw_row(tensor_seed(t.aux, seed), 0, t.aux_stddev, t.aux_mean, norm_w.data(), n_embd);
  }
  // A low-rank twin gate and its fc1 need V; fc1 the norm's weights too (`aux`).
  std::vector<float> v, low_rank;  // low_rank: the gate's rows [row0, row1)
  if (t.low_rank > 0 && t.derived == Derived::kNone)
    low_rank = low_rank_rows(t, seed, twin_gate_v(t.name, seed, t.low_rank, ne0, t.stddev), row0,
                             row1, pool);
  if (t.derived == Derived::kTwinFc1) {
    v = twin_gate_v(t.source, seed, t.low_rank, ne0, t.stddev);
    norm_w.resize(static_cast<size_t>(ne0));
    draw_row(tensor_seed(t.aux, seed), 0, t.aux_stddev, t.aux_mean, norm_w.data(), ne0);
  }
  pool->run([&](int ith, int nth) {
    std::vector<float> row(static_cast<size_t>(ne0));  // [ne0], one row in f32
    std::vector<float> g;
    std::vector<uint8_t> q;
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t r = row0 + i;
      if (twin_pred) {
        twin_predictor_row(t, seed, v, norm_w.data(), r, row.data());
      } else if (pred) {
        predictor_row(t, seed_t, r, norm_w.data(), row.data(), g, q);
      } else {
        if (t.low_rank > 0)
          std::copy_n(low_rank.data() + i * ne0, ne0, row.data());
        else
          draw_row(seed_t, r, t.stddev, t.mean, row.data(), ne0);
        const int64_t ch = std::min<int64_t>(kTwinChannel, ne0);
        if (t.channel_value != 0.0f) std::fill(row.begin(), row.begin() + ch, t.channel_value);
        if (t.channel_bias)
          std::fill(row.begin(), row.begin() + ch, (*t.channel_bias)[static_cast<size_t>(r)]);
        if (t.zero_channel_rows && r < kTwinChannel) std::fill(row.begin(), row.end(), 0.0f);
        if (t.row_decay != 0.0f) {
          const float scale = static_cast<float>(
              std::pow(1.0 + static_cast<double>(r), -static_cast<double>(t.row_decay)));
          for (float& v : row) v *= scale;
        }
      }
      quant::quantize_row(t.type, row.data(), buf->data() + i * rb, ne0);
    }
  });
}

void generate_rows(const TensorSpec& t, uint64_t seed, int threads, int64_t row0, int64_t row1,
                   std::vector<uint8_t>* buf) {
  ThreadPool pool(threads);
  generate_tensor(t, seed, &pool, row0, row1, buf);
}

// "4.0 KiB", "70.3 MiB", "3.59 GiB".
std::string size_string(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  char s[32];
  if (b < 1048576.0)
    std::snprintf(s, sizeof s, "%.1f KiB", b / 1024.0);
  else if (b < 1073741824.0)
    std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(s, sizeof s, "%.2f GiB", b / 1073741824.0);
  return s;
}

uint64_t tensor_bytes(const TensorSpec& t) {
  return static_cast<uint64_t>(row_bytes(t.type, t.ne[0]) * n_rows(t));
}

void announce(const Config& c, uint64_t file_bytes) {
  const Shape& s = c.shape;
  auto num = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", static_cast<double>(v));
    return std::string(b);
  };
  std::string extra;
  if (c.arch != "llama") extra += ", arch " + c.arch;
  if (c.norm_jitter > 0) extra += ", norm jitter " + num(c.norm_jitter);
  if (layer_norm_arch(c.arch))
    extra += ", " + std::string(c.arch == "opt" ? "" : "norm ") + "bias " + num(c.norm_bias);
  if (c.arch == "qwen2") extra += ", qkv bias " + num(c.norm_bias);
  if (c.head_dim_given) extra += ", head_dim " + std::to_string(c.head_dim);
  if (c.n_expert > 0)
    extra += ", " + std::to_string(c.n_expert_used) + " of " + std::to_string(c.n_expert) +
             " experts of n_ff " + std::to_string(c.n_ff_exp) + ", skew " + num(c.expert_skew);
  if (c.falcon_norm2) extra += ", attn_norm_2";
  if (c.gate_rank > 0) extra += ", gate rank " + std::to_string(c.gate_rank);
  if (c.powerinfer)
    extra += ", PowerInfer layout (" + std::string(c.twin ? "twin" : c.gate_predictor ? "gate" : "random") +
             " predictor, rank " + std::to_string(c.pred_rank) + " " +
             dtype_name(c.pred_type.type) + ", threshold " + num(c.sparse_threshold) + ")";
  std::fprintf(stderr,
               "%s: %s shape, %d layers, n_embd %d, n_ff %d, heads %d/%d, vocab %d, %s, %s%s, "
               "seed %llu, %d threads -> %s (%s)\n",
               kTool, s.name, c.n_layer, s.n_embd, s.n_ff, s.n_head, s.n_head_kv, s.n_vocab,
               dtype_name(c.wtype.type), c.act.c_str(), extra.c_str(),
               static_cast<unsigned long long>(c.seed), c.threads, c.out.c_str(),
               size_string(file_bytes).c_str());
}

// Header, then each tensor generated, written and padded in turn.
Status write_model(const Config& c, const std::string& path) {
  const std::vector<TensorSpec> specs = tensor_specs(c);
  const GgufWriter w = make_writer(c, specs);
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> header, w.serialize_header());
  // PowerInfer tells its sparse files by the magic alone (ggml.c gguf_init_from_file:
  // "PWRI" -> GGML_SPARSE_INFERENCE); the rest is GGUF v3, as its converter writes it.
  if (c.powerinfer) std::memcpy(header.data(), "PWRI", 4);
  uint64_t total = header.size();
  for (const TensorSpec& t : specs) total += tensor_bytes(t) + w.padding(tensor_bytes(t));
  FilePtr f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Status::Error("cannot open '" + path + "' for writing: " + std::strerror(errno));
  announce(c, total);

  HC_TRY(write_bytes(f.get(), header.data(), header.size(), path));
  ThreadPool pool(c.threads);
  std::vector<uint8_t> buf;
  const std::vector<uint8_t> zeros(w.alignment, 0);
  uint64_t written = header.size();
  const double t0 = now_seconds();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& t = specs[i];
    // A 3-D expert tensor is generated and written one expert at a time (memory: one expert
    // matrix, not all of them: Mixtral's F16 ffn_up_exps is 940 MiB).
    const int64_t rows = n_rows(t);
    const int64_t chunk = t.ne.size() > 2 && t.derived == Derived::kNone ? t.ne[1] : rows;
    for (int64_t r = 0; r < rows; r += chunk) {
      generate_tensor(t, c.seed, &pool, r, std::min(rows, r + chunk), &buf);
      HC_TRY(write_bytes(f.get(), buf.data(), buf.size(), path));
    }
    const uint64_t nbytes = tensor_bytes(t);
    HC_TRY(write_bytes(f.get(), zeros.data(), w.padding(nbytes), path));
    written += nbytes + w.padding(nbytes);
    std::fprintf(stderr, "[%3zu/%zu] %-24s %-16s %-4s %10s  %5.1f%%  %6.1f s\n", i + 1,
                 specs.size(), t.name.c_str(), shape_string(t.ne).c_str(), dtype_name(t.type),
                 size_string(nbytes).c_str(), 100.0 * static_cast<double>(written) / total,
                 now_seconds() - t0);
  }
  if (std::fclose(f.release()) != 0)
    return Status::Error("write to '" + path + "' failed: " + std::strerror(errno));
  if (written != total)
    return Status::Error("internal: wrote " + std::to_string(written) + " bytes, expected " +
                         std::to_string(total));
  std::fprintf(stderr, "%s: wrote %s (%s) in %.1f s\n", kTool, c.out.c_str(),
               size_string(total).c_str(), now_seconds() - t0);
  return Status::Ok();
}

}  // namespace hc::synth
