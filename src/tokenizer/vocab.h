// The loaded vocabulary behind hc::Tokenizer (internal to the tokenizer layer).
#pragma once
#include <cstdint>
#include <functional>
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

// Open-addressing hash table of int32 indices (linear probing, power-of-two capacity, at most
// 3/4 full: half full cost SmolLM2's two 49k tables 1 MiB more and tokenized WikiText-2 no
// faster, 0.20-0.21 s either way). The keys live elsewhere: callers pass each key's hash and a test "is the key of
// index i equal to mine", so a table of 49k token texts costs 4 bytes a slot, not a string
// and a heap node per entry.
class IndexTable {
 public:
  // Empty, sized for up to n insertions.
  void reset(size_t n);
  // The index whose key equals (per `eq`), or -1.
  template <typename Eq>
  int32_t find(uint64_t hash, const Eq& eq) const {
    if (slots_.empty()) return -1;
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const int32_t idx = slots_[i];
      if (idx < 0 || eq(idx)) return idx;
    }
  }
  // Adds `index` unless an equal key is present; returns the index now holding the key.
  // At most the n of reset() insertions.
  template <typename Eq>
  int32_t insert(uint64_t hash, int32_t index, const Eq& eq) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      int32_t& idx = slots_[i];
      if (idx < 0) {
        idx = index;
        return index;
      }
      if (eq(idx)) return idx;
    }
  }
  size_t bytes() const { return slots_.capacity() * sizeof(int32_t); }

 private:
  std::vector<int32_t> slots_;  // [capacity] an index, or -1 when free
};

struct Tokenizer::Vocab {
  enum class Type { kSpm, kBpe };

  Type type = Type::kSpm;
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre

  // Token texts as stored in the GGUF (SPM: U+2581 for spaces; BPE: byte-encoded), back to back
  // in one arena: token id's text is text_arena[text_offsets[id], text_offsets[id + 1]).
  std::string text_arena;
  std::vector<uint32_t> text_offsets;  // [n_vocab + 1]
  std::vector<float> scores;           // [n_vocab], or empty when the file has none (all 0)
  std::vector<uint32_t> attrs;         // [n_vocab] TokenAttr bits
  IndexTable token_table;              // token text -> id

  // BPE merges "left right" -> rank, as llama.cpp's bpe_ranks: keyed by the pair of token ids
  // (merge_pairs[rank] = left id << 32 | right id; kNoPair where the rank is not in the
  // table). Merges naming a text that is not a token (none in real vocabularies) are kept by
  // their "left right" text in merges_by_text instead.
  static constexpr uint64_t kNoPair = ~uint64_t{0};
  std::vector<uint64_t> merge_pairs;  // [n_merges]
  IndexTable merge_table;             // (left id, right id) -> rank
  std::unordered_map<std::string, int32_t> merges_by_text;
  std::vector<pretok::Step> pre_steps;  // BPE pre-tokenizer

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

  int32_t n_vocab() const { return static_cast<int32_t>(attrs.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  std::string_view text(int32_t id) const {
    return std::string_view(text_arena).substr(text_offsets[id],
                                               text_offsets[id + 1] - text_offsets[id]);
  }
  float score(int32_t id) const { return scores.empty() ? 0.0f : scores[id]; }
  uint32_t attr(int32_t id) const { return attrs[id]; }

  static uint64_t hash_text(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static uint64_t hash_pair(uint64_t key);
  static uint64_t pair_key(int32_t left, int32_t right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }

  // The id of the token with exactly this text, or -1.
  int32_t find(std::string_view s) const {
    return token_table.find(hash_text(s), [&](int32_t id) { return text(id) == s; });
  }
  // Rank of the merge of tokens left and right, or -1.
  int32_t merge_rank(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    return merge_table.find(hash_pair(key), [&](int32_t rank) { return merge_pairs[rank] == key; });
  }
  // llama_token_to_piece with special = true: SPM U+2581 -> space and <0xXX> -> byte, BPE
  // GPT-2 byte decoding, control / user-defined / unknown text verbatim, others "".
  std::string render_piece(int32_t id) const;
  // SPM byte fallback: <0xXX>, else the byte itself as a token, else <unk> (-1 if none).
  int32_t spm_byte_token(uint8_t byte) const;
};

// Reads tokenizer.ggml.* (vocab.cpp).
Result<std::shared_ptr<const Tokenizer::Vocab>> load_vocab(const GgufFile& gguf);

// Tokenizers for one run of raw text (no special tokens in it); they append to `out`.
void spm_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out);
void bpe_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

}  // namespace hc
