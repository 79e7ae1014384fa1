// hotcold convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf: a llama2.c checkpoint
// to a GGUF that both hotcold and llama.cpp load (format/llama2c.h does the work).
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "core/mmap.h"
#include "format/llama2c.h"

namespace hc {

namespace {

constexpr char kCmd[] = "convert";

}  // namespace

int cmd_convert(const Args& args) {
  std::string model_path, tok_path, out_path, name;
  ArgParser p(kCmd,
              "Convert a llama2.c checkpoint (legacy v0 export) and its tokenizer.bin to GGUF,\n"
              "as llama.cpp's convert-llama2c-to-ggml does.");
  p.add_string("--llama2c", &model_path, "llama2.c checkpoint (.bin)");
  p.add_string("--tokenizer", &tok_path, "llama2.c tokenizer.bin");
  p.add_string("-o,--output", &out_path, "output GGUF file");
  p.add_string("--name", &name, "general.name to record (default: llama)");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  const char* missing = model_path.empty() ? "--llama2c MODEL.bin"
                        : tok_path.empty() ? "--tokenizer TOK.bin"
                        : out_path.empty() ? "-o OUT.gguf"
                                           : nullptr;
  if (missing)
    return usage_error(kCmd, std::string("missing ") + missing + "; see 'hotcold convert --help'");

  auto model_bin = MappedFile::open(model_path);
  if (!model_bin.ok()) return exit_code_for(kCmd, model_bin.status());
  auto tok_bin = MappedFile::open(tok_path);
  if (!tok_bin.ok()) return exit_code_for(kCmd, tok_bin.status());
  auto converted = convert_llama2c(model_bin->bytes(), tok_bin->bytes());
  if (!converted.ok())
    return exit_code_for(kCmd, converted.status().with_context(model_path + " / " + tok_path));
  if (!name.empty()) converted->name = name;
  const Llama2cConfig& c = converted->config;
  std::fprintf(stderr,
               "hotcold convert: n_embd %d, n_ff %d, n_layer %d, n_head %d, n_head_kv %d, "
               "n_vocab %d, n_ctx %d, %s classifier\n",
               c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
               c.shared_classifier ? "shared" : "separate");
  Status written = write_then_rename(
      out_path, [&](const std::string& tmp_path) { return converted->write_gguf(tmp_path); });
  if (!written.ok()) return exit_code_for(kCmd, written);
  std::fprintf(stderr, "hotcold convert: wrote %s (%zu tensors)\n", out_path.c_str(),
               converted->tensors.size());
  return 0;
}

}  // namespace hc
