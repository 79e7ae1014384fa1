// Whole-layer dense offload, llama.cpp's -ngl (perfmodel/dense_offload.h).
#include "perfmodel/dense_offload.h"

#include <algorithm>

#include "perfmodel/detail.h"
#include "perfmodel/device_ops.h"
#include "perfmodel/moe_costs.h"

namespace hc::perfmodel {

using detail::kGB;
using detail::kUs;

double dense_seconds(const SimInput& in, const SimOptions& opt, int n_dev, bool output_dev,
                     uint64_t* device_bytes) {
  const ModelBytes& m = in.model;
  if (m.moe()) {  // whole layers: a layer's experts are where the layer is
    const int n = std::clamp(n_dev, 0, m.n_layer());
    return cpu_moe_seconds(in, opt, {n, output_dev, m.n_layer() - n}, device_bytes);
  }
  const double host = host_dense_rate(in);
  const double dev = in.hw.has_device ? in.hw.dev_gbps() * kGB : host;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer();
  n_dev = std::clamp(n_dev, 0, n_layer);
  double s = 0;
  uint64_t bytes = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    const double read = static_cast<double>(b.attn + b.ffn_dense + kv / 2);
    if (l >= n_layer - n_dev) {
      s += read / dev;
      bytes += b.attn + b.ffn_dense + kv;
    } else {
      s += read / host;
    }
  }
  const bool uses = n_dev > 0 || output_dev;
  if (uses) {
    const int ops = n_dev * kDenseLayerOps + kTransferOps + (output_dev ? kOutputOps : 0);
    const double back = static_cast<double>(output_dev ? m.n_vocab : m.n_embd) * 4;
    const int paced = n_dev * kPacedDenseLayerOps + kTransferOps + (output_dev ? 1 : 0);
    s += ops * in.hw.op_us * kUs + paced * in.hw.paced_op_us * kUs + in.hw.sync_us * kUs +
         (static_cast<double>(m.n_embd) * 4 + back) / (in.hw.link_gbps * kGB);
    bytes += in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  }
  s += static_cast<double>(m.output) / (output_dev ? dev : host);
  if (output_dev) bytes += m.output;
  if (device_bytes) *device_bytes = bytes;
  return s;
}

void dense_layers_that_fit(const SimInput& in, const SimOptions& opt, int* n_dev,
                           bool* output_dev) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  uint64_t used = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  *n_dev = 0;
  *output_dev = false;
  if (!in.hw.has_device) return;
  for (int l = m.n_layer() - 1; l >= 0; --l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    used += b.attn + b.ffn_dense + kv;
    if (used > opt.budget_bytes) return;
    ++*n_dev;
  }
  *output_dev = used + m.output <= opt.budget_bytes;
}

}  // namespace hc::perfmodel
