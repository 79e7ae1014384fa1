// hotcold run: generate a continuation of a prompt. Only the generated text goes to stdout.
#include <cstdio>
#include <fstream>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "core/log.h"
#include "engine/decoder.h"

namespace hc {

namespace {

constexpr char kCmd[] = "run";

struct RunFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  std::string prompt, file, seed, logits_out;
  int n_predict = 128;
  bool ids = false, ignore_eos = false, no_bos = false;
  SamplerParams sampling;
};

Status write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error("cannot open '" + path + "' for writing");
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return out ? Status::Ok() : Status::Error("write to '" + path + "' failed");
}

Status run(const RunFlags& f) {
  ModelFlags mf = f.model;
  f.sparse.apply_to(&mf);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  std::string prompt = f.prompt;
  if (!f.file.empty()) {
    HC_ASSIGN_OR_RETURN(prompt, read_text_file(f.file));
  }
  const Tokenizer& tok = model->tokenizer();
  std::vector<int32_t> tokens = tok.encode(prompt, !f.no_bos, /*parse_special=*/true);
  if (tokens.empty()) {
    if (tok.bos_id() < 0) return Status::Error("empty prompt and the model has no BOS token");
    tokens.push_back(tok.bos_id());
  }
  Session session(model, session_params(f.model));
  session.set_sparse(sparse);
  DeviceModel* placed = nullptr;
  HC_TRY(attach_device(session, f.device, f.sparse, f.model.model, sparse, &placed));
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DynamicSparsity> dyn,
                      attach_dynamic(session, f.dynamic, sparse.get(), placed, f.sparse.stats));
  if (static_cast<int>(tokens.size()) >= session.n_ctx())
    return Status::Error("prompt is " + std::to_string(tokens.size()) +
                         " tokens but the context holds " + std::to_string(session.n_ctx()) +
                         " (raise -c or shorten the prompt)");
  Sampler sampler(f.sampling);
  Decoder decoder(session, sampler, /*need_logits=*/!f.logits_out.empty());
  const double t0 = now_seconds();
  HC_TRY(decoder.eval(tokens));
  const double t_prompt = now_seconds() - t0;
  if (!f.logits_out.empty()) HC_TRY(write_floats(f.logits_out, session.logits()));

  int n_gen = 0;
  const double t1 = now_seconds();
  while (n_gen < f.n_predict && session.n_past() < session.n_ctx()) {
    const int32_t next = decoder.next();
    if (!f.ignore_eos && tok.is_eog(next)) break;
    if (f.ids) std::printf("%d\n", next);
    else std::fputs(tok.token_to_piece(next, false).c_str(), stdout);
    std::fflush(stdout);
    ++n_gen;
    if (n_gen == f.n_predict) break;
    const int32_t one[1] = {next};
    HC_TRY(decoder.eval(one));
  }
  const double t_gen = now_seconds() - t1;
  if (!f.ids) std::fputc('\n', stdout);
  HC_LOG_INFO("prompt: %zu tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s)",
              tokens.size(), t_prompt, tokens.size() / std::max(t_prompt, 1e-9), n_gen, t_gen,
              n_gen / std::max(t_gen, 1e-9));
  if (sparse) {
    const SparseStats& st = session.sparse_stats();
    if (st.active > 0 && model->hparams().ffn_act == FfnActivation::kDRelu)
      // dReLU: what the down projection skipped on top
      HC_LOG_INFO("sparse FFN: %.1f%% of activations skipped, %.1f%% zero after dReLU's up",
                  100.0 * st.sparsity(), 100.0 * st.active_sparsity());
    else
      HC_LOG_INFO("sparse FFN: %.1f%% of activations skipped", 100.0 * st.sparsity());
  }
  if (dyn) HC_LOG_INFO("%s", dyn->summary().c_str());
  return Status::Ok();
}

}  // namespace

int cmd_run(const Args& args) {
  RunFlags f;
  ArgParser p(kCmd, "generate text from a prompt (only the generated text is printed)");
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_string("-p,--prompt", &f.prompt, "prompt text");
  p.add_string("-f,--file", &f.file, "read the prompt from a file");
  p.add_int("-n,--n-predict", &f.n_predict, "tokens to generate");
  add_sampling_flags(p, &f.sampling, &f.seed);
  p.add_flag("--ignore-eos", &f.ignore_eos, "keep generating after an end-of-generation token");
  p.add_flag("--no-bos", &f.no_bos, "do not add BOS/EOS special tokens to the prompt");
  p.add_flag("--ids", &f.ids, "print generated token ids, one per line, instead of text");
  p.add_string("--logits-out", &f.logits_out,
               "write the last prompt token's logits (float32 [n_vocab]) to this file");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (!f.prompt.empty() && !f.file.empty())
    return usage_error(kCmd, "give either -p or -f, not both");
  if (f.n_predict < 0)
    return usage_error(kCmd, "-n: expected a non-negative count, found " +
                                 std::to_string(f.n_predict));
  if (Status st = resolve_seed(f.seed, &f.sampling); !st.ok())
    return usage_error(kCmd, st.message());
  return exit_code_for(kCmd, run(f));
}

}  // namespace hc
