// How many operations the engine queues on a device per layer, as the performance model charges
// them (op_us each, paced_op_us more for the weight-streaming ones of a paced CPU device). The
// counts follow the executors: model/hybrid_forward.cpp for dense and hybrid layers, llama.cpp's
// build_moe_ffn for MoE layers on the device. Not part of the model's interface.
#pragma once

namespace hc::perfmodel {

// Queued operations of one dense layer on the device (model/hybrid_forward.cpp): attention
// rmsnorm, wq, wk, wv, 2 ropes, kv_store, attention, wo, add; FFN rmsnorm, gate, up, glu, down,
// add.
constexpr int kDenseLayerOps = 16;
constexpr int kOutputOps = 2;     // output rmsnorm and matrix
constexpr int kTransferOps = 2;   // the residual to the device, the result back
// Of those, the ones a paced CPU device sleeps in (HardwareSpec::paced_op_us): the 7 matrices of
// a dense layer; the output matrix; every copy; a hybrid layer's 4 attention matrices plus its
// 2 copies, and its FFN kernel plus 2 copies.
constexpr int kPacedDenseLayerOps = 7;
constexpr int kPacedAttnOps = 4 + 2;
constexpr int kPacedFfnOps = 1 + 2;
constexpr int kPacedOutputOps = 1 + 2;
// An MoE layer on the device, as llama.cpp's build_moe_ffn queues it: the attention's 10
// operations above; the router's 5 (FFN rmsnorm, router matrix, softmax, top-k, the chosen
// weights); the experts' 4 + n_used (gate, up, glu, down, each one mul_mat_id over the routed
// experts; the weighting, n_used - 1 adds of the experts' outputs, the residual add). Paced: 4
// attention matrices, the router, the 3 expert matrices.
constexpr int kAttnOps = 10;
constexpr int kMoeRouterOps = 5;
constexpr int kMoeExpertOps = 4;  // + n_expert_used
constexpr int kPacedMoeRestOps = 4 + 1;
constexpr int kPacedMoeExpertOps = 3;
// The hybrid executor's FFN on the device for an MoE layer: x and the routing in, gate, up,
// glu and down over its routed experts, their weighted sum, y out.
constexpr int kMoeHybridFfnOps = 8;

}  // namespace hc::perfmodel
