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
  std::string text;  // left + right when queued: a later mismatch means stale
  int32_t rank;
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

  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  const auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    std::string key(symbols[left].text, symbols[left].n);
    key += ' ';
    key.append(symbols[right].text, symbols[right].n);
    const auto it = vocab.bpe_ranks.find(key);
    if (it == vocab.bpe_ranks.end()) return;
    key.erase(symbols[left].n, 1);  // drop the separator: the pair's text
    queue.push({left, right, std::move(key), it->second});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0) continue;
    if (left.n + right.n != bigram.text.size() ||
        std::string_view(left.text, left.n + right.n) != bigram.text) {
      continue;
    }
    merge_symbols(symbols, bigram.left, bigram.right);
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (const Symbol& sym : symbols) {
    if (sym.n == 0) continue;
    const std::string text(sym.text, sym.n);
    const int32_t id = vocab.find(text);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // As llama.cpp: try each byte of the encoded text as a token of its own (only ASCII ones
    // can exist), silently dropping the rest.
    for (const char ch : text) {
      const int32_t byte_id = vocab.find(std::string(1, ch));
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
