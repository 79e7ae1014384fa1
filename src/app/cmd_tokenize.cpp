// hotcold tokenize -m MODEL (-p TEXT | -f FILE): one token id per line, like llama.cpp's
// llama-tokenize with --ids. Only the GGUF metadata (the vocabulary) is read.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "tokenizer/tokenizer.h"

namespace hc {

namespace {

constexpr char kCmd[] = "tokenize";

}  // namespace

int cmd_tokenize(const Args& args) {
  std::string model, prompt, file;
  bool no_bos = false, no_parse_special = false, show_pieces = false;
  ArgParser p(kCmd,
              "Print the token ids of a text, one per line (as llama-tokenize --ids).\n"
              "By default special tokens (BOS, ...) are added and special-token text such as\n"
              "'<s>' in the input is parsed as that token.");
  add_model_option(p, &model, "GGUF file (or a cached model's name) holding the vocabulary");
  p.add_string("-p,--prompt", &prompt, "text to tokenize");
  p.add_string("-f,--file", &file, "read the text to tokenize from this file");
  p.add_flag("--no-bos", &no_bos,
             "add no special tokens and treat special-token text as plain text");
  p.add_flag("--no-parse-special", &no_parse_special,
             "treat special-token text in the input as plain text");
  p.add_flag("--show-pieces", &show_pieces, "print 'id<TAB>piece' instead of the id alone");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (model.empty()) return usage_error(kCmd, "missing -m MODEL; see 'hotcold tokenize --help'");
  // -p "" is a legitimate (empty) text, so presence is judged by the raw arguments.
  bool has_prompt = false;
  for (const std::string& a : args)
    if (a == "-p" || a == "--prompt" || a.rfind("-p=", 0) == 0 || a.rfind("--prompt=", 0) == 0)
      has_prompt = true;
  if (has_prompt == !file.empty())
    return usage_error(kCmd, "give exactly one of -p TEXT or -f FILE");
  if (!file.empty()) {
    auto text = read_text_file(file);
    if (!text.ok()) return exit_code_for(kCmd, text.status());
    prompt = std::move(*text);
  }

  auto mapped = open_model_gguf(model);
  if (!mapped.ok()) return exit_code_for(kCmd, mapped.status());
  auto tok = Tokenizer::from_gguf(mapped->gguf);
  if (!tok.ok()) return exit_code_for(kCmd, tok.status().with_context(model));
  const bool add_special = !no_bos;
  const bool parse_special = !no_bos && !no_parse_special;
  const std::vector<int32_t> ids = tok->encode(prompt, add_special, parse_special);
  for (int32_t id : ids) {
    if (show_pieces) {
      // Pieces may be partial UTF-8 or control bytes; show them unambiguously on one line.
      const std::string piece = tok->token_to_piece(id, /*special=*/true);
      std::printf("%d\t'%s'\n", id, escape_control(piece, /*quoted=*/true).c_str());
    } else {
      std::printf("%d\n", id);
    }
  }
  return 0;
}

}  // namespace hc
