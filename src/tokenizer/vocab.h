// The loaded vocabulary behind hc::Tokenizer (internal to the tokenizer layer).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace hc {

// llama_token_attr bits, derived from tokenizer.ggml.token_type and name-based fix-ups.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 7,  // eat whitespace before the token when splitting it out of text
  kAttrRstrip = 1 << 8,  // ... and after it
};

struct Tokenizer::Vocab {
  enum class Type { kSpm, kBpe };

  struct Token {
    std::string text;  // as stored in the GGUF (SPM: U+2581 for spaces; BPE: byte-encoded)
    float score = 0.0f;
    uint32_t attr = kAttrNormal;
  };

  Type type = Type::kSpm;
  std::string model;          // tokenizer.ggml.model
  std::string pre;            // tokenizer.ggml.pre
  std::vector<Token> tokens;  // [n_vocab]
  // Same container and insertion order as llama.cpp's token_to_id, because llama.cpp picks
  // the EOT / FIM tokens by iterating it: keeping the order keeps the choice.
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<std::string, int32_t> bpe_ranks;  // "left right" -> merge rank
  std::vector<pretok::Step> pre_steps;                 // BPE pre-tokenizer

  bool add_space_prefix = false;  // SPM: prepend " " to text that follows BOS/start/special
  bool clean_spaces = false;      // decode: drop spaces before ?!., and in contractions
  bool ignore_merges = false;     // BPE: a word that is itself a token skips the merges
  bool add_bos = false;
  bool add_eos = false;

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::unordered_set<int32_t> eog;

  // Control / user-defined / unknown tokens, longest text first: the order in which they are
  // split out of raw text (llama.cpp's cache_special_tokens).
  std::vector<int32_t> special_tokens;
  std::vector<std::string> pieces;  // token_to_piece(id, special = true) for every id

  int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  int32_t find(const std::string& text) const {
    const auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  // SPM byte fallback: <0xXX>, else the byte itself as a token, else <unk> (-1 if none).
  int32_t spm_byte_token(uint8_t byte) const;
};

// Reads tokenizer.ggml.* (vocab.cpp).
Result<std::shared_ptr<const Tokenizer::Vocab>> load_vocab(const GgufFile& gguf);

// Tokenizers for one run of raw text (no special tokens in it); they append to `out`.
void spm_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out);
void bpe_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

}  // namespace hc
