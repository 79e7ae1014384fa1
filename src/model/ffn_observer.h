// A hook that sees every layer's FFN activations while the forward pass runs: activation
// profiling (hotcold profile) and online firing statistics use it.
#pragma once
#include <cstdint>

namespace hc {

class FfnObserver {
 public:
  virtual ~FfnObserver() = default;
  // act: [n_tok, n_ff] the activations act(gate . x) (ReLU or SiLU, before the product with
  // up) of layer il, for the tokens of one forward call. Called on the forward pass's thread.
  virtual void on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) = 0;
  // x: [n_tok, n_embd] layer il's FFN input before ffn_norm (the residual stream, PowerInfer's
  // ffn_inp: what the predictors read; gate and up read it RMS-normed), before the FFN runs.
  // Optional.
  virtual void on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) {
    (void)il, (void)x, (void)n_tok, (void)n_embd;
  }
  // Mixture-of-experts layers (they call these two instead of on_ffn_activation):
  // experts [n_tok, k] the experts the router chose for each token, in top-k order, before
  // they run. Optional.
  virtual void on_moe_routing(int il, const int32_t* experts, int64_t n_tok, int k) {
    (void)il, (void)experts, (void)n_tok, (void)k;
  }
  // act [n_rows, n_ff] = act(gate . x) of expert e's neurons for the n_rows tokens routed to
  // it (ascending token order), as on_ffn_activation's for a dense FFN. Optional.
  virtual void on_expert_activation(int il, int expert, const float* act, int64_t n_rows,
                                    int64_t n_ff) {
    (void)il, (void)expert, (void)act, (void)n_rows, (void)n_ff;
  }
};

}  // namespace hc
