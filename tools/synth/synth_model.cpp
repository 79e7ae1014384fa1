// hc-synth-model: writes a LLaMA-architecture GGUF model with random weights in the shape of a
// real model (Llama-2-7B by default), for benchmarks where weight bandwidth dominates and the
// values do not matter. The file loads in hotcold and in llama.cpp: llama.cpp's GGUF names and
// metadata keys, a synthetic SentencePiece vocabulary, every matrix in one uniform type.
// Also the fixtures of the PowerInfer reference (tests/reference/test_powerinfer_parity.py):
// `--arch bamboo` (PowerInfer's dReLU llama variant) and `--powerinfer` (its sparse "PWRI"
// layout: transposed down matrices, random or gate-exact activation predictors), which
// PowerInfer loads too. `--arch falcon`: Falcon (LayerNorm with bias, fused QKV, ungated GELU
// FFN in parallel with attention), in llama.cpp's layout or with --powerinfer in PowerInfer's.
// `--arch opt`: PowerInfer's OPT (learned positions, biases everywhere, ReLU FFN, output tied to
// token_embd), in its dense layout or with --powerinfer in its sparse one.
// `--arch qwen2` (llama plus Q/K/V biases), `--arch qwen3` (llama plus per-head Q/K RMS norms,
// any head_dim), and Mixture-of-Experts files: `--experts N --experts-used K` with `--arch
// llama` (Mixtral's layout) or `--arch qwen3moe` (Qwen3-30B-A3B's): a router ffn_gate_inp (F32)
// and 3-D expert tensors ffn_{gate,up,down}_exps, with router rows scaled so that expert
// popularity falls off with the expert's index (--expert-skew).
//
// Weights: approximately normal (an Irwin-Hall sum of four uniforms), mean 0, standard
// deviation 1/sqrt(row length) for matrices, so every matmul maps unit-RMS inputs to unit-RMS
// outputs whatever the shape; 1 for token_embd; norms are exactly 1 (or 1 + jitter * N(0, 1)
// with --norm-jitter); biases (falcon's LayerNorms, all of opt's) --norm-bias * N(0, 1); opt's
// token_embd (also its output matrix) and position_embd 1/sqrt(n_embd). Logits then have a
// standard deviation of about 1: finite and input-dependent, never degenerate.
//
// Deterministic: row r of tensor T is drawn from a generator seeded by (seed, T's name, r), so
// the bytes depend on the seed only, never on the thread count. The file is streamed tensor by
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
#include "quant/quant.h"
#include "synth.h"

namespace hc::synth {
namespace {

// ---- command line --------------------------------------------------------------------------

int error(const std::string& message, int exit_code) {
  std::fprintf(stderr, "%s: error: %s\n", kTool, message.c_str());
  return exit_code;
}

int run(const std::vector<std::string>& args) {
  Flags f;
  ArgParser p(kTool,
              "Writes a LLaMA (or Falcon, OPT, Qwen, Mixtral-style MoE) GGUF model with random\n"
              "weights of a real model's shape, loadable by hotcold and llama.cpp (with --arch\n"
              "bamboo or opt or --powerinfer: by hotcold and PowerInfer), for benchmarks and\n"
              "reference tests. Shapes (opt: n_head_kv = n_head, context 2050):\n"
              "  llama2-7b      n_embd 4096, n_ff 11008, 32/32 heads, vocab 32000, context 4096\n"
              "  falcon-7b      n_embd 4544, n_ff 18176, 71/1 heads, vocab 65024, context 2048\n"
              "  opt-6.7b       n_embd 4096, n_ff 16384, 32/32 heads, vocab 50272, context 2050\n"
              "  qwen2.5-7b     n_embd 3584, n_ff 18944, 28/4 heads, vocab 152064, context 32768,\n"
              "                 rope base 1e6, rms eps 1e-6\n"
              "  mixtral-8x7b   n_embd 4096, 32/8 heads, 8 experts of n_ff 14336, 2 used, vocab\n"
              "                 32000, context 32768, rope base 1e6\n"
              "  qwen3-30b-a3b  n_embd 2048, n_ff 6144 (dense, unused), 32/4 heads of 128, 128\n"
              "                 experts of n_ff 768, 8 used, vocab 151936, context 40960, rope\n"
              "                 base 1e6, rms eps 1e-6\n"
              "  tiny           n_embd 256, n_ff 768, 4/2 heads, vocab 512, context 2048");
  p.add_string("--shape", &f.shape, "model shape: " + shape_names());
  p.add_int("--n-embd", &f.n_embd, "override the shape's n_embd; 0 = keep");
  p.add_int("--n-ff", &f.n_ff, "override the shape's n_ff; 0 = keep");
  p.add_int("--n-head", &f.n_head, "override the shape's n_head; 0 = keep");
  p.add_int("--n-head-kv", &f.n_head_kv, "override the shape's n_head_kv; 0 = keep");
  p.add_int("--n-vocab", &f.n_vocab, "override the shape's n_vocab; 0 = keep");
  p.add_int("--layers", &f.layers, "number of layers");
  p.add_string("--type", &f.type, "weight type: " + type_names());
  p.add_string("--arch", &f.arch,
               "general.architecture: llama (with --experts: Mixtral), bamboo (PowerInfer's "
               "relu(gate) * relu(up)), falcon (LayerNorm, fused QKV, ungated FFN parallel to "
               "attention), opt (PowerInfer's: learned positions, biases, ReLU FFN, output tied "
               "to token_embd), qwen2 (llama + Q/K/V biases, NEOX RoPE), qwen3 (llama + per-head "
               "Q/K RMS norms, NEOX RoPE) or qwen3moe (qwen3 with routed experts)");
  p.add_int("--head-dim", &f.head_dim,
            "attention head size (llama, qwen2, qwen3, qwen3moe); 0 = the shape's, else "
            "n_embd / n_head");
  p.add_int("--experts", &f.experts,
            "routed experts per layer (--arch llama: Mixtral's layout; qwen3moe: required); "
            "-1 = the shape's, 0 = dense");
  p.add_int("--experts-used", &f.experts_used, "experts per token; 0 = the shape's");
  p.add_int("--n-ff-exp", &f.n_ff_exp,
            "an expert's FFN width; 0 = the shape's, else n_ff (--arch llama: n_ff is the "
            "expert width)");
  p.add_float("--expert-skew", &f.expert_skew,
              "router row e scaled by (1 + e)^-S: low-index experts are chosen more often "
              "(0..4; 0 = uniform popularity) (default: 0.5)");
  p.add_string("--act", &f.act,
               "FFN activation: silu or relu (falcon: gelu or relu; opt: relu), written as "
               "hotcold's key (hotcold only) where it is not the file's own; empty = the file's "
               "own (llama silu, falcon gelu, PowerInfer llama / falcon relu, opt relu, bamboo "
               "drelu)");
  p.add_float("--norm-jitter", &f.norm_jitter,
              "norm weights 1 + J * N(0, 1) instead of exactly 1 (0..1)");
  p.add_float("--norm-bias", &f.norm_bias,
              "falcon: LayerNorm biases B * N(0, 1) (0..1, default 0.05; attn_norm's are 0 with "
              "--pred-kind gate); opt: every bias (ffn_norm's and ffn_up's are 0 with "
              "--pred-kind gate); qwen2: the Q/K/V biases (default 0.5)");
  p.add_flag("--falcon-norm2", &f.falcon_norm2,
             "falcon: a second LayerNorm per layer, attn_norm_2, for attention (Falcon-40B); "
             "the FFN reads attn_norm");
  p.add_flag("--powerinfer", &f.powerinfer,
             "PowerInfer's sparse layout: magic PWRI, ffn_down_t instead of ffn_down, "
             "predictors fc1 / fc2 (--pred-*), powerinfer.sparse_threshold");
  p.add_string("--pred-kind", &f.pred_kind,
               "predictors (--powerinfer): random, or gate: exact, built from the layer's "
               "ffn_norm and ffn_gate so the logit is rms(x) * gate (rank 2 n_embd; falcon: "
               "from attn_norm and ffn_up, logit std(x) * up, rank 2 n_embd + 2 blocks; opt: "
               "the same from ffn_norm and ffn_up)");
  p.add_int("--pred-rank", &f.pred_rank,
            "predictor rank (fc1 rows; --powerinfer); 0 = 64 for random, the exact rank for "
            "gate");
  p.add_string("--pred-type", &f.pred_type,
               "predictor weight type (--powerinfer; f16 as PowerInfer's converter writes)");
  p.add_float("--sparse-threshold", &f.sparse_threshold,
              "powerinfer.sparse_threshold (--powerinfer): a neuron is computed when its "
              "predictor logit is >= this");
  p.add_string("--twin", &f.twin,
               "a statistical twin: a real shape whose ReLU-family FFN fires with published "
               "statistics (" + twin_names() + "; see tools/synth/README.md); needs --calib; "
               "--shape and --layers may shrink it (default: the twin's shape, 32 layers)");
  p.add_string("--calib", &f.calib,
               "--twin: text file the firing is calibrated on (the model itself is run on it)");
  p.add_int("--calib-tokens", &f.calib_tokens, "--twin: tokens of --calib used");
  p.add_int("--gate-rank", &f.gate_rank,
            "--twin: every gate row is U_i V beside the channel, V of rank R (the values' spread "
            "unchanged), so that a predictor of rank 2 R + 32 is exact; needed for --powerinfer "
            "(PowerInfer's predictor size, rank 1024: R = 496); 0 = full-rank gates");
  p.add_float("--target-recall", &f.target_recall,
              "--twin --powerinfer: each layer's predictor threshold keeps this share of the "
              "firing (token, neuron) pairs of --calib");
  p.add_u64("--seed", &f.seed, "random seed");
  p.add_int("-t,--threads", &f.threads, "threads");
  p.add_string("-o,--output", &f.out, "output GGUF file (required)");
  const Status st = p.parse(args);
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (!st.ok()) return error(st.message(), 2);
  Result<Config> c = validate(f);
  if (!c.ok()) return error(c.message(), 2);
  if (c->twin) {
    Status st = calibrate_twin_biases(*c);
    if (st.ok() && c->powerinfer) st = calibrate_twin_predictors(*c);
    if (!st.ok()) return error(st.message(), 1);
  }
  const Status written = write_then_rename(
      c->out, [&](const std::string& tmp_path) { return write_model(*c, tmp_path); });
  return written.ok() ? 0 : error(written.message(), 1);
}

}  // namespace
}  // namespace hc::synth

int main(int argc, char** argv) {
  try {
    return hc::synth::run(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", hc::synth::kTool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", hc::synth::kTool, e.what());
  }
  return 1;
}
