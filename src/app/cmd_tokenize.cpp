// hotcold tokenize -m MODEL (-p TEXT | -f FILE): one token id per line, like llama.cpp's
// llama-tokenize with --ids. Only the GGUF metadata (the vocabulary) is read.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "app/args.h"
#include "app/commands.h"
#include "core/mmap.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hc {

namespace {

// Pieces may be partial UTF-8 or control bytes; show them unambiguously on one line.
std::string printable_piece(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\'') out += "\\'";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error("cannot open '" + path + "' for reading");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return Status::Error("read from '" + path + "' failed");
  return text;
}

}  // namespace

int cmd_tokenize(const Args& args) {
  std::string model, prompt, file;
  bool no_bos = false, no_parse_special = false, show_pieces = false;
  ArgParser p("tokenize",
              "Print the token ids of a text, one per line (as llama-tokenize --ids).\n"
              "By default special tokens (BOS, ...) are added and special-token text such as\n"
              "'<s>' in the input is parsed as that token.");
  p.add_string("-m,--model", &model, "GGUF file holding the vocabulary");
  p.add_string("-p,--prompt", &prompt, "text to tokenize");
  p.add_string("-f,--file", &file, "read the text to tokenize from this file");
  p.add_flag("--no-bos", &no_bos,
             "add no special tokens and treat special-token text as plain text");
  p.add_flag("--no-parse-special", &no_parse_special,
             "treat special-token text in the input as plain text");
  p.add_flag("--show-pieces", &show_pieces, "print 'id<TAB>piece' instead of the id alone");
  if (Status st = p.parse(args); !st.ok()) {
    std::fprintf(stderr, "hotcold tokenize: %s\n", st.message().c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  if (model.empty()) {
    std::fprintf(stderr, "hotcold tokenize: missing -m MODEL; see 'hotcold tokenize --help'\n");
    return 2;
  }
  // -p "" is a legitimate (empty) text, so presence is judged by the raw arguments.
  bool has_prompt = false;
  for (const std::string& a : args)
    if (a == "-p" || a == "--prompt" || a.rfind("-p=", 0) == 0 || a.rfind("--prompt=", 0) == 0)
      has_prompt = true;
  if (has_prompt == !file.empty()) {
    std::fprintf(stderr, "hotcold tokenize: give exactly one of -p TEXT or -f FILE\n");
    return 2;
  }
  if (!file.empty()) {
    auto text = read_file(file);
    if (!text.ok()) {
      std::fprintf(stderr, "hotcold tokenize: error: %s\n", text.message().c_str());
      return 1;
    }
    prompt = std::move(*text);
  }

  auto mf = MappedFile::open(model);
  if (!mf.ok()) {
    std::fprintf(stderr, "hotcold tokenize: error: %s\n", mf.message().c_str());
    return 1;
  }
  auto gguf = parse_gguf(mf->bytes());
  if (!gguf.ok()) {
    std::fprintf(stderr, "hotcold tokenize: error: %s: %s\n", model.c_str(),
                 gguf.message().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_gguf(*gguf);
  if (!tok.ok()) {
    std::fprintf(stderr, "hotcold tokenize: error: %s: %s\n", model.c_str(),
                 tok.message().c_str());
    return 1;
  }
  const bool add_special = !no_bos;
  const bool parse_special = !no_bos && !no_parse_special;
  const std::vector<int32_t> ids = tok->encode(prompt, add_special, parse_special);
  for (int32_t id : ids) {
    if (show_pieces) {
      std::printf("%d\t'%s'\n", id, printable_piece(tok->token_to_piece(id, /*special=*/true)).c_str());
    } else {
      std::printf("%d\n", id);
    }
  }
  return 0;
}

}  // namespace hc
