// A STREAM-like memory bandwidth probe. Decoding one token at batch size 1 reads every weight
// once, so tokens/s can never exceed (read bandwidth) / (weight bytes per token): the probe
// measures that bandwidth on this machine, with the same thread pool the forward pass uses.
//
// Kernels over float arrays much larger than the last-level cache, each thread on its own
// contiguous slice (no shared accumulators: the read kernel reduces per-thread partials):
//   read   sum(a)              4 bytes per element   (decode's pattern: weights are only read)
//   copy   c = a               8
//   scale  b = s * c           8
//   add    c = a + b          12
//   triad  a = b + s * c      12
// Bytes are counted as STREAM does: each array read or written once, write-allocate traffic
// not counted. GB/s are 1e9 bytes per second, from the best of `reps` timed passes (STREAM's
// convention) and from the median pass.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace hc::ops {

enum class MembwKernel { kRead = 0, kCopy, kScale, kAdd, kTriad };
constexpr int kMembwKernels = 5;
// "read", "copy", "scale", "add", "triad".
const char* membw_kernel_name(MembwKernel k);
// Bytes one pass moves per array element (STREAM's counting): 4, 8, 8, 12, 12.
int64_t membw_bytes_per_element(MembwKernel k);

// Single-thread read kernels: sum of a[0, n) with several independent vector accumulators,
// so one core is limited by memory, not by the add latency. Lane sums are float, the final
// reduction double. The SSE2 one is the baseline build's; the AVX2 one is nullptr when this
// CPU lacks AVX2.
using MembwReadFn = double (*)(const float* a, int64_t n);
MembwReadFn membw_read_sse2();
MembwReadFn membw_read_avx2();
// The widest of the above; `isa` (may be null) receives "avx2" or "sse2".
MembwReadFn membw_read_best(const char** isa);

// The kernels on n-element arrays, split across the pool (each thread its own slice, slices
// aligned to 64 bytes). membw_read returns sum(a) (read_fn null = membw_read_best);
// membw_read_repeat reads each slice `passes` times in one dispatch and returns passes * sum(a).
double membw_read(const float* a, int64_t n, ThreadPool& pool, MembwReadFn read_fn = nullptr);
double membw_read_repeat(const float* a, int64_t n, int passes, ThreadPool& pool,
                         MembwReadFn read_fn = nullptr);
void membw_copy(float* c, const float* a, int64_t n, ThreadPool& pool);
void membw_scale(float* b, const float* c, float s, int64_t n, ThreadPool& pool);
void membw_add(float* c, const float* a, const float* b, int64_t n, ThreadPool& pool);
void membw_triad(float* a, const float* b, const float* c, float s, int64_t n, ThreadPool& pool);

struct MembwParams {
  int64_t array_bytes = int64_t{256} << 20;  // per array; keep >> LLC (32 MiB on EPYC here)
  int reps = 10;                             // timed passes per kernel; the best one counts
  bool read_only = false;                    // only the read kernel (one array): a short probe
  MembwReadFn read_fn = nullptr;             // null: membw_read_best
  // Reads of the array per timed read pass, in one dispatch of the pool: for arrays that sit in
  // cache (the ceiling a cache-resident model's kernels read at), where one read takes
  // microseconds and the dispatch would otherwise dominate. GB/s count every read.
  int read_passes = 1;
};

struct MembwResult {
  int n_threads = 0;
  int64_t array_bytes = 0;  // rounded down to whole 64-byte lines
  int reps = 0;
  const char* read_isa = "";
  double gbs[kMembwKernels] = {};         // best-of-reps GB/s (STREAM's figure); 0: not run
  double median_gbs[kMembwKernels] = {};  // median pass: the sustained figure, less noisy
  double best_s[kMembwKernels] = {};      // seconds of the best pass
  double read_checksum = 0;           // sum the read kernel returned (the array holds 1.0f)
  double gbs_of(MembwKernel k) const { return gbs[static_cast<int>(k)]; }
  double median_gbs_of(MembwKernel k) const { return median_gbs[static_cast<int>(k)]; }
};

// Allocates the arrays (3, or 1 when read_only), touches every page in parallel, runs one
// untimed warm-up pass and `reps` timed passes of each kernel, and frees the arrays. Errors:
// array_bytes below one line or reps < 1, or the allocation failing.
Result<MembwResult> measure_membw(const MembwParams& params, ThreadPool& pool);

}  // namespace hc::ops
