// hotcold chat: interactive chat using the model's chat template. Reads one user message per
// line from stdin (a terminal or a pipe) and streams each reply to stdout.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "core/log.h"
#include "engine/chat_template.h"
#include "engine/decoder.h"

namespace hc {

namespace {

constexpr char kCmd[] = "chat";

// The model, sparse, device and dynamic flags are run's: the same flags give the same text.
struct ChatFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  std::string system, chat_template, seed;
  int n_predict = 512;
  SamplerParams sampling;
};

// Evaluates the rendered conversation, reusing the cached prefix it shares with the session.
Status feed(Session& s, Decoder& d, const std::vector<int32_t>& tokens) {
  size_t common = 0;
  const auto& h = s.history();
  while (common < h.size() && common < tokens.size() && h[common] == tokens[common]) ++common;
  if (common == tokens.size() && common > 0) --common;  // always re-evaluate one token for logits
  s.truncate(static_cast<int>(common));
  return d.eval(std::span<const int32_t>(tokens).subspan(common));
}

Result<std::string> reply(Session& s, Decoder& d, int n_predict) {
  const Tokenizer& tok = s.model().tokenizer();
  std::string text;
  for (int i = 0; i < n_predict; ++i) {
    if (s.n_past() >= s.n_ctx())
      return Status::Error("context full (" + std::to_string(s.n_ctx()) + " tokens); raise -c");
    const int32_t next = d.next();
    if (tok.is_eog(next)) break;
    const std::string piece = tok.token_to_piece(next, false);
    text += piece;
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    const int32_t one[1] = {next};
    HC_TRY(d.eval(one));
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return text;
}

Status chat(ChatFlags& f) {
  ModelFlags mf = f.model;
  f.sparse.apply_to(&mf);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  std::string tmpl = f.chat_template;
  if (tmpl.empty()) {
    auto from_file = model->gguf().get_string("tokenizer.chat_template");
    tmpl = from_file.ok() ? *from_file : "chatml";
    if (!from_file.ok()) HC_LOG_WARN("model has no chat template; using chatml");
  }
  HC_TRY(detect_chat_template(tmpl).status());
  Session session(model, session_params(f.model));
  session.set_sparse(sparse);
  DeviceModel* placed = nullptr;
  HC_TRY(attach_device(session, f.device, f.sparse, f.model.model, sparse, &placed));
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DynamicSparsity> dyn,
                      attach_dynamic(session, f.dynamic, sparse.get(), placed, f.sparse.stats));
  Sampler sampler(f.sampling);
  Decoder decoder(session, sampler);
  std::vector<ChatMessage> msgs;
  if (!f.system.empty()) msgs.push_back({"system", f.system});
  const bool tty = isatty(STDIN_FILENO);
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    msgs.push_back({"user", line});
    HC_ASSIGN_OR_RETURN(std::string rendered, apply_chat_template(tmpl, msgs, true));
    const std::vector<int32_t> tokens = model->tokenizer().encode(rendered, true, true);
    if (static_cast<int>(tokens.size()) >= session.n_ctx())
      return Status::Error("conversation is " + std::to_string(tokens.size()) +
                           " tokens, the context holds " + std::to_string(session.n_ctx()) + " (raise -c)");
    HC_TRY(feed(session, decoder, tokens));
    HC_ASSIGN_OR_RETURN(std::string answer, reply(session, decoder, f.n_predict));
    msgs.push_back({"assistant", answer});
  }
  if (dyn) HC_LOG_INFO("%s", dyn->summary().c_str());
  return Status::Ok();
}

}  // namespace

int cmd_chat(const Args& args) {
  ChatFlags f;
  ArgParser p(kCmd, "interactive chat with the model's chat template (stdin may be a pipe)");
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_string("-sys,--system-prompt", &f.system, "system message");
  p.add_string("--chat-template", &f.chat_template, "template name or text (default: the model's)");
  p.add_int("-n,--n-predict", &f.n_predict, "maximum tokens per reply");
  add_sampling_flags(p, &f.sampling, &f.seed);
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (Status st = resolve_seed(f.seed, &f.sampling); !st.ok())
    return usage_error(kCmd, st.message());
  return exit_code_for(kCmd, chat(f));
}

}  // namespace hc
