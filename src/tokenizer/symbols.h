// The linked list of byte ranges that SPM and BPE merging both work on (llama.cpp's
// llm_symbol): one symbol per UTF-8 character at first, neighbours merged pairwise.
#pragma once
#include <algorithm>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace hc {

struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;  // bytes; 0 once merged into its left neighbour
};

// Appends one linked symbol per UTF-8 character of text (a truncated final sequence stays
// one symbol). The first appended symbol's prev is the previous last index (-1 if none).
inline void append_utf8_symbols(std::string_view text, std::vector<Symbol>* symbols) {
  for (size_t offs = 0; offs < text.size();) {
    const size_t n =
        std::min(unicode::utf8_len(static_cast<uint8_t>(text[offs])), text.size() - offs);
    const int index = static_cast<int>(symbols->size());
    offs += n;
    symbols->push_back({index - 1, offs == text.size() ? -1 : index + 1, text.data() + offs - n, n});
  }
}

// Merges symbols[right] into its left neighbour symbols[left] and relinks the list.
inline void merge_symbols(std::vector<Symbol>& symbols, int left, int right) {
  Symbol& l = symbols[left];
  Symbol& r = symbols[right];
  l.n += r.n;
  r.n = 0;
  l.next = r.next;
  if (r.next >= 0) symbols[r.next].prev = left;
}

}  // namespace hc
