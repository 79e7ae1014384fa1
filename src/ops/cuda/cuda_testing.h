// Test hooks into the CUDA device that are not part of ops/device.h (no CUDA headers here).
#pragma once
#include "core/tensor_view.h"
#include "ops/device.h"

namespace hc::ops::cuda {

// Queues the dequantisation of every row of w (device memory) into out [w.ne1, w.ne0] fp32
// (device memory) on dev's queue: the kernel the matmul uses before cuBLAS, bit-exact with
// quant::dequantize_row_ref. dev must come from open_cuda_device (HC_CHECK); errors are
// reported by dev.sync().
void dequantize_rows(Device& dev, const TensorView& w, float* out);

// Whether dev's FFN operators compute gate and up in one kernel (the default, unless
// HOTCOLD_CUDA_FFN_FUSED=0) or in two: the two must give the same bits.
void set_ffn_fused(Device& dev, bool fused);

}  // namespace hc::ops::cuda
