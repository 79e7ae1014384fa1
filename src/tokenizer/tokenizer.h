// Tokenizer driven by a GGUF file's vocabulary metadata (tokenizer.ggml.*), reproducing
// llama.cpp's llama-vocab exactly: SentencePiece-style ("llama": score-ordered bigram merges,
// spaces escaped as U+2581, byte fallback) and byte-level BPE ("gpt2": the pre-tokenizer named
// by tokenizer.ggml.pre, then rank-ordered merges). Control / user-defined token text can be
// split out before tokenizing, BOS/EOS are added as the metadata says, and decoding renders
// pieces as llama_token_to_piece / llama_detokenize do.
//
// A Tokenizer is immutable after from_gguf and cheap to copy (its vocabulary is shared), so
// any number of threads may use one at once.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"

namespace hc {

class Tokenizer {
 public:
  // Reads tokenizer.ggml.model / .pre / .tokens / .scores / .token_type / .merges, the special
  // token ids and the add_bos / add_eos / add_space_prefix flags. Unknown models or
  // pre-tokenizers and missing or inconsistent arrays are errors naming the key.
  static Result<Tokenizer> from_gguf(const GgufFile& gguf);

  // llama_tokenize: with parse_special, control tokens written in the text become their ids
  // (user-defined tokens always do, as in llama.cpp); with add_special, BOS/EOS are added when
  // the model asks for them. Invalid UTF-8 is tokenized as U+FFFD (BPE) or raw bytes (SPM).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // llama_token_to_piece: the bytes a token stands for (SPM: U+2581 -> space and <0xXX> ->
  // byte; BPE: GPT-2 byte decoding). Control and unknown tokens render only when `special`.
  // Ids outside the vocabulary render as "".
  std::string token_to_piece(int32_t id, bool special) const;

  // llama_detokenize(remove_special = false, unparse_special = special): concatenated pieces,
  // minus the space SPM adds in front, with the vocabulary's clean-up of spaces before
  // punctuation for the pre-tokenizers that ask for it (gpt-2, starcoder, falcon, ...).
  std::string decode(std::span<const int32_t> ids, bool special = false) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none
  int32_t eot_id() const;  // -1 if none (from metadata, else found by text as llama.cpp does)
  bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, EOM and llama.cpp's list
  bool add_bos() const;
  bool add_eos() const;
  int32_t token_id(std::string_view piece) const;  // exact token text; -1 if absent
  // Raw vocabulary entry, valid as long as the tokenizer (or a copy of it); id must be valid.
  std::string_view token_text(int32_t id) const;
  const std::string& model_name() const;            // tokenizer.ggml.model: "llama" or "gpt2"
  const std::string& pre_name() const;              // tokenizer.ggml.pre ("default" when absent)

  struct Vocab;  // defined in tokenizer/vocab.h

 private:
  explicit Tokenizer(std::shared_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {}
  std::shared_ptr<const Vocab> vocab_;
};

}  // namespace hc
