// hotcold convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf: a llama2.c checkpoint
// to a GGUF that both hotcold and llama.cpp load (format/llama2c.h does the work).
#include <cstdio>
#include <string>

#include "app/args.h"
#include "app/commands.h"
#include "core/mmap.h"
#include "format/llama2c.h"

namespace hc {

int cmd_convert(const Args& args) {
  std::string model_path, tok_path, out_path, name;
  ArgParser p("convert",
              "Convert a llama2.c checkpoint (legacy v0 export) and its tokenizer.bin to GGUF,\n"
              "as llama.cpp's convert-llama2c-to-ggml does.");
  p.add_string("--llama2c", &model_path, "llama2.c checkpoint (.bin)");
  p.add_string("--tokenizer", &tok_path, "llama2.c tokenizer.bin");
  p.add_string("-o,--output", &out_path, "output GGUF file");
  p.add_string("--name", &name, "general.name to record (default: llama)");
  if (Status st = p.parse(args); !st.ok()) {
    std::fprintf(stderr, "hotcold convert: %s\n", st.message().c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  const char* missing = model_path.empty() ? "--llama2c MODEL.bin"
                        : tok_path.empty() ? "--tokenizer TOK.bin"
                        : out_path.empty() ? "-o OUT.gguf"
                                           : nullptr;
  if (missing) {
    std::fprintf(stderr, "hotcold convert: missing %s; see 'hotcold convert --help'\n", missing);
    return 2;
  }

  auto model_bin = MappedFile::open(model_path);
  if (!model_bin.ok()) {
    std::fprintf(stderr, "hotcold convert: error: %s\n", model_bin.message().c_str());
    return 1;
  }
  auto tok_bin = MappedFile::open(tok_path);
  if (!tok_bin.ok()) {
    std::fprintf(stderr, "hotcold convert: error: %s\n", tok_bin.message().c_str());
    return 1;
  }
  auto converted = convert_llama2c(model_bin->bytes(), tok_bin->bytes());
  if (!converted.ok()) {
    std::fprintf(stderr, "hotcold convert: error: %s / %s: %s\n", model_path.c_str(),
                 tok_path.c_str(), converted.message().c_str());
    return 1;
  }
  if (!name.empty()) converted->name = name;
  const Llama2cConfig& c = converted->config;
  std::fprintf(stderr,
               "hotcold convert: n_embd %d, n_ff %d, n_layer %d, n_head %d, n_head_kv %d, "
               "n_vocab %d, n_ctx %d, %s classifier\n",
               c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
               c.shared_classifier ? "shared" : "separate");
  const std::string tmp_path = out_path + ".tmp";
  if (Status st = converted->write_gguf(tmp_path); !st.ok()) {
    std::remove(tmp_path.c_str());
    std::fprintf(stderr, "hotcold convert: error: %s\n", st.message().c_str());
    return 1;
  }
  if (std::rename(tmp_path.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp_path.c_str());
    std::fprintf(stderr, "hotcold convert: error: cannot rename '%s' to '%s'\n", tmp_path.c_str(),
                 out_path.c_str());
    return 1;
  }
  std::fprintf(stderr, "hotcold convert: wrote %s (%zu tensors)\n", out_path.c_str(),
               converted->tensors.size());
  return 0;
}

}  // namespace hc
