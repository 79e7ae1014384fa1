// Byte-level BPE as llama.cpp's llm_tokenizer_bpe_session: pre-tokenize into words, then in
// each word keep merging the adjacent pair with the lowest merge rank (leftmost first on ties).
#include <queue>

#include "tokenizer/symbols.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace hc {

namespace {

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t size;  // bytes of left + right when queued: a later mismatch means stale
};

// Min-heap order on rank, then the leftmost pair.
struct BigramGreater {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

// Merges within one pre-tokenized word; appends the resulting symbols' token ids.
void tokenize_word(const Tokenizer::Vocab& vocab, const std::string& word,
                   std::vector<int32_t>* out) {
  std::vector<Symbol> symbols;  // [one per UTF-8 character of word, or the whole word]
  if (vocab.ignore_merges && vocab.find(word) >= 0) {
    symbols.push_back({-1, -1, word.data(), word.size()});
  } else {
    append_utf8_symbols(word, &symbols);
  }
  const auto text_of = [&](int i) { return std::string_view(symbols[i].text, symbols[i].n); };
  std::vector<int32_t> ids(symbols.size());  // [symbols] token id of each symbol's text, or -1
  for (size_t i = 0; i < symbols.size(); ++i) ids[i] = vocab.find(text_of(static_cast<int>(i)));

  // llama.cpp looks pairs up by their texts. Words are GPT-2 byte-encoded (no raw spaces), so
  // a pair of texts names at most one merge: by token ids when both are tokens, else by text.
  const auto rank_of = [&](int left, int right) -> int32_t {
    if (ids[left] >= 0 && ids[right] >= 0) return vocab.merge_rank(ids[left], ids[right]);
    if (vocab.merges_by_text.empty()) return -1;
    std::string key(text_of(left));
    key += ' ';
    key += text_of(right);
    const auto it = vocab.merges_by_text.find(key);
    return it == vocab.merges_by_text.end() ? -1 : it->second;
  };
  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  const auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const int32_t rank = rank_of(left, right);
    if (rank < 0) return;
    queue.push({left, right, rank, symbols[left].n + symbols[right].n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Symbols only grow rightwards from a fixed start, so an unchanged size means unchanged
    // text (llama.cpp compares the texts).
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    merge_symbols(symbols, bigram.left, bigram.right);
    ids[bigram.left] = vocab.find(text_of(bigram.left));
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].n == 0) continue;
    if (ids[i] >= 0) {
      out->push_back(ids[i]);
      continue;
    }
    // As llama.cpp: try each byte of the encoded text as a token of its own (only ASCII ones
    // can exist), silently dropping the rest.
    for (const char ch : text_of(static_cast<int>(i))) {
      const int32_t byte_id = vocab.find(std::string_view(&ch, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace

void bpe_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  for (const std::string& word : pretok::split_words(text, vocab.pre_steps)) {
    tokenize_word(vocab, word, out);
  }
}

}  // namespace hc
