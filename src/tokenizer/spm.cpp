// SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm_session: start from single
// UTF-8 characters and keep merging the adjacent pair whose concatenation is the vocabulary
// token with the highest score (leftmost first on ties); leftovers fall back to byte tokens.
#include <queue>

#include "tokenizer/symbols.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace hc {

namespace {

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of left + right when queued: a later size mismatch means stale
};

// Max-heap order: highest score first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

int32_t Tokenizer::Vocab::spm_byte_token(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char hex[7] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>', 0};
  int32_t id = find(std::string_view(hex, 6));
  if (id < 0) {
    const char c = static_cast<char>(byte);
    id = find(std::string_view(&c, 1));
  }
  return id >= 0 ? id : unk;
}

void spm_tokenize(const Tokenizer::Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  std::vector<Symbol> symbols;  // [one per UTF-8 character of text]
  append_utf8_symbols(text, &symbols);
  if (symbols.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  const auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view pair(symbols[left].text, symbols[left].n + symbols[right].n);
    const int32_t id = vocab.find(pair);
    if (id < 0) return;
    queue.push({left, right, vocab.score(id), pair.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    merge_symbols(symbols, bigram.left, bigram.right);
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  // Every merged symbol is a token by construction; only single characters can be missing
  // (llama.cpp's resegment() can never find them in its merge map), and those become bytes.
  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& sym = symbols[i];
    const int32_t id = vocab.find(std::string_view(sym.text, sym.n));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (size_t j = 0; j < sym.n; ++j) {
      const int32_t byte_id = vocab.spm_byte_token(static_cast<uint8_t>(sym.text[j]));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace hc
