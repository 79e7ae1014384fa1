// Argument checks of every device's queued operations (hc_device_checks, below hc_cuda,
// hc_vulkan and hc_ops). A device skips an operation it cannot run and reports it from sync()
// (ops/device.h): the CPU device (cpu_device.cpp) because the host's kernels trust their
// arguments (HC_CHECK aborts, or they read and write out of bounds), the GPUs before launching
// (ops/cuda/cuda_device.cu, ops/vulkan/vk_device.cpp) — one set of checks and messages, plus
// what only the CPU kernels need (no null pointers, no negative sizes: a GPU reports those from
// the device, a CPU would crash).
//
// Each returns "" when the arguments are usable, else what is wrong; the device prefixes the
// operation's name ("matmul: weight (Q5_0 [4, 64]): weight type Q5_0 is not supported ...").
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/tensor_view.h"
#include "ops/cpu/attention.h"
#include "ops/device.h"

namespace hc::ops::device_checks {

// The longest head attention_one takes (its on-stack fp16 copy of one head of q).
inline constexpr int kMaxHeadDim = 512;

// Weight types every device's kernels compute with (the host's minus Q5_0 / Q5_1).
bool device_weight_type(GgmlType t);
// A weight matrix the kernels can read: a device weight type, rows of whole blocks with `ne0`
// inputs each (-1: any), data present, rows not overlapping and aligned as quant.h needs
// (2 bytes; 4 for F32). `name` names the matrix in the message, with its type and shape.
std::string weight(const char* name, const TensorView& w, int64_t ne0);
// The FFN operators' matrices: each a readable weight with gate's row length, all holding the
// same neurons.
// up is not checked (and may be empty) for GluKind::kReluUngated.
std::string ffn(const TensorView& gate, const TensorView& up, const TensorView& down_t,
                GluKind kind);
// ffn_rows' local neuron indices, read when the operation runs (they are device memory a
// queued copy may still write): every idx[j] in [0, n_rows).
std::string ffn_indices(const int32_t* idx, int64_t n_idx, int64_t n_rows);
std::string rope(int n_rot, int head_dim, int pos0);
std::string kv_store(int64_t n_tok, int pos0, int64_t kv_dim, int n_ctx);
std::string attention(const AttentionShape& shape, int pos0, int64_t n_tok);
// Row migration: same type and row length, every slot and source row in range.
std::string update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                        const int32_t* slots, int64_t n);
// fire_mask's arguments: sizes not negative, x and fire present, and without a column list
// at most n columns.
std::string fire_mask(const float* x, int64_t n, const int32_t* cols, int64_t n_cols,
                      const uint8_t* fire);
// moe_topk's arguments: n_tok not negative, 1 <= k <= n_expert, x, ids and w present.
std::string moe_topk(const float* x, int64_t n_tok, int n_expert, int k, const int32_t* ids,
                     const float* w);
// matmul_id's: a readable weight of whole matrices of `rows` rows, n_ids not negative,
// x_stride 0 or a row of x, ids, x and y present.
std::string matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                      const float* x, int64_t x_stride, const float* y);
// moe_combine's: sizes not negative, k >= 1, y, w and out present.
std::string moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                        const float* out);
// "x is null" for the first named pointer that is null, else "".
std::string nulls(std::initializer_list<std::pair<const char*, const void*>> ptrs);
// "n_tok -3 must be >= 0" for the first named size that is negative, else "".
std::string negatives(std::initializer_list<std::pair<const char*, int64_t>> sizes);

}  // namespace hc::ops::device_checks
