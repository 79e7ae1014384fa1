#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace hc::pretok {

namespace {

using unicode::cpt_flags;
using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunctuation;
using unicode::kWhitespace;

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// One piece of text being split further: code points [ini, end) of the whole input. Reads
// past the piece see kOutOfRange / no flags, as in llama.cpp's _get_cpt / _get_flags.
class Piece {
 public:
  Piece(std::span<const uint32_t> cpts, size_t ini, size_t end, std::vector<size_t>* out)
      : cpts_(cpts), ini_(ini), end_(end), prev_end_(ini), out_(out) {}

  size_t ini() const { return ini_; }
  size_t end() const { return end_; }
  uint32_t cpt(size_t pos) const { return pos >= ini_ && pos < end_ ? cpts_[pos] : kOutOfRange; }
  uint16_t flags(size_t pos) const { return pos >= ini_ && pos < end_ ? cpt_flags(cpts_[pos]) : 0; }
  // Ends the current word at `end`; returns its length (0 adds nothing).
  size_t add(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_->push_back(len);
    prev_end_ = end;
    return len;
  }

 private:
  std::span<const uint32_t> cpts_;
  size_t ini_, end_, prev_end_;
  std::vector<size_t>* out_;
};

bool is_ws(uint16_t f) { return f & kWhitespace; }
bool is_letter(uint16_t f) { return f & kLetter; }
bool is_number(uint16_t f) { return f & kNumber; }
// [^\s\p{L}\p{N}] for a code point inside the piece (flags 0 means outside).
bool is_other(uint16_t f) { return !(f & (kWhitespace | kLetter | kNumber)) && f != 0; }

// 's|'t|'re|'ve|'m|'ll|'d, case-folded when `fold`; returns the match length or 0.
size_t contraction(const Piece& p, size_t pos, bool fold) {
  if (p.cpt(pos) != '\'' || pos + 1 >= p.end()) return 0;
  const auto lower = [&](uint32_t c) { return fold ? unicode::to_lower(c) : c; };
  const uint32_t c1 = lower(p.cpt(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= p.end()) return 0;
  const uint32_t c2 = lower(p.cpt(pos + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// The last alternatives of both custom splitters: \s+(?!\S) (a run of num_ws whitespace code
// points at pos leaves its last one to the next word), then \s+, else a single code point
// that matched nothing. Returns the position after the emitted piece.
size_t split_whitespace_run(Piece& p, size_t pos, size_t num_ws) {
  if (num_ws > 1 && p.cpt(pos + num_ws) != kOutOfRange) pos += num_ws - 1;
  else if (num_ws > 0) pos += num_ws;
  else ++pos;
  p.add(pos);
  return pos;
}

// llama.cpp's unicode_regex_split_custom_gpt2.
void split_gpt2(Piece& p) {
  for (size_t pos = p.ini(); pos < p.end();) {
    const uint32_t cpt = p.cpt(pos);
    const uint16_t flags = p.flags(pos);
    if (const size_t n = contraction(p, pos, /*fold=*/false)) {
      pos += p.add(pos + n);
      continue;
    }
    uint16_t flags2 = cpt == ' ' ? p.flags(pos + 1) : flags;
    if (is_letter(flags2)) {  // <space>?\p{L}+
      pos += (cpt == ' ');
      while (is_letter(flags2)) flags2 = p.flags(++pos);
      p.add(pos);
      continue;
    }
    if (is_number(flags2)) {  // <space>?\p{N}+
      pos += (cpt == ' ');
      while (is_number(flags2)) flags2 = p.flags(++pos);
      p.add(pos);
      continue;
    }
    if (is_other(flags2)) {  // <space>?[^\s\p{L}\p{N}]+
      pos += (cpt == ' ');
      while (is_other(flags2)) flags2 = p.flags(++pos);
      p.add(pos);
      continue;
    }
    size_t num_ws = 0;
    while (is_ws(p.flags(pos + num_ws))) num_ws++;
    pos = split_whitespace_run(p, pos, num_ws);
  }
}

// llama.cpp's unicode_regex_split_custom_llama3 (max_digits 3: \p{N}{1,3}), including its use
// of the current code point's flags (not the next one's) to enter the ` ?[^\s\p{L}\p{N}]+`
// branch; with max_digits 1 (\p{N}) it is unicode_regex_split_custom_qwen2, otherwise the same.
void split_llama3(Piece& p, size_t max_digits) {
  for (size_t pos = p.ini(); pos < p.end();) {
    const uint32_t cpt = p.cpt(pos);
    const uint16_t flags = p.flags(pos);
    if (const size_t n = contraction(p, pos, /*fold=*/true)) {
      pos += p.add(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(cpt == '\r' || cpt == '\n' || is_number(flags))) {
      if (is_letter(flags) || is_letter(p.flags(pos + 1))) {
        pos++;
        while (is_letter(p.flags(pos))) pos++;
        p.add(pos);
        continue;
      }
    }
    if (is_number(flags)) {  // \p{N}{1,max_digits}
      size_t ini = pos;
      while (is_number(p.flags(pos))) {
        if (++pos - ini >= max_digits) {
          p.add(pos);
          ini = pos;
        }
      }
      p.add(pos);
      continue;
    }
    // <space>?[^\s\p{L}\p{N}]+[\r\n]*
    uint16_t flags2 = cpt == ' ' ? p.flags(pos + 1) : flags;
    if (!(flags2 & (kWhitespace | kLetter | kNumber)) && flags != 0) {
      pos += (cpt == ' ');
      while (is_other(flags2)) flags2 = p.flags(++pos);
      uint32_t cpt2 = p.cpt(pos);
      while (cpt2 == '\r' || cpt2 == '\n') cpt2 = p.cpt(++pos);
      p.add(pos);
      continue;
    }
    size_t num_ws = 0;
    size_t last_end_r_or_n = 0;
    while (is_ws(p.flags(pos + num_ws))) {
      const uint32_t cpt2 = p.cpt(pos + num_ws);
      if (cpt2 == '\r' || cpt2 == '\n') last_end_r_or_n = pos + num_ws + 1;
      num_ws++;
    }
    if (last_end_r_or_n > 0) {  // \s*[\r\n]+
      pos = last_end_r_or_n;
      p.add(pos);
      continue;
    }
    pos = split_whitespace_run(p, pos, num_ws);
  }
}

// --- the std::regex patterns, as llama.cpp evaluates them over collapsed text ---
// Collapsing keeps ASCII as is and maps a non-ASCII code point to \v when it is White_Space,
// else to one byte per category, so a class like \p{L} matches ASCII letters by value and
// other code points by category. std::regex's \s (C locale) agrees with White_Space on ASCII.

bool ascii_punct_or_symbol(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// [\p{P}\$\+<=>\^~\|`] (falcon) or the same without the backtick (default).
bool in_punct_class(uint32_t c, bool with_backtick) {
  if (c < 128) return ascii_punct_or_symbol(c) && (with_backtick || c != '`');
  const uint16_t f = cpt_flags(c);
  return !(f & kWhitespace) && (f & kPunctuation);
}

// [一-龥ࠀ-一가-퟿] over llama.cpp's wide text, where non-ASCII White_Space became \v.
bool in_cjk_class(uint32_t c) {
  const bool in =
      (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF);
  return in && !(cpt_flags(c) & kWhitespace);
}

// Length of a run of code points with `pred` starting at pos.
template <class Pred>
size_t run(const Piece& p, size_t pos, Pred pred) {
  size_t n = 0;
  while (pos + n < p.end() && pred(p.cpt(pos + n))) n++;
  return n;
}

// Length of the regex match starting exactly at `pos` (0: none).
size_t match_at(Step step, const Piece& p, size_t pos) {
  const uint32_t c = p.cpt(pos);
  const auto letter = [](uint32_t x) { return is_letter(cpt_flags(x)); };
  const auto punct = [](uint32_t x) { return (cpt_flags(x) & kPunctuation) != 0; };
  const auto space = [](uint32_t x) { return is_ws(cpt_flags(x)); };
  switch (step) {
    case Step::kNumber:
      return is_number(cpt_flags(c)) ? 1 : 0;
    case Step::kNumbers:
      return run(p, pos, [](uint32_t x) { return is_number(cpt_flags(x)); });
    case Step::kThreeDigits:
      return run(p, pos, [](uint32_t x) { return x >= '0' && x <= '9'; }) >= 3 ? 3 : 0;
    case Step::kPunctRunFalcon:
      return run(p, pos, [](uint32_t x) { return in_punct_class(x, true); });
    case Step::kPunctRunDefault:
      return run(p, pos, [](uint32_t x) { return in_punct_class(x, false); });
    case Step::kNewline:
      return (c == '\r' || c == '\n') ? 1 : 0;
    case Step::kSpaceLetters:  // \s?\p{L}+ : a leading space only when letters follow
      if (space(c) && pos + 1 < p.end() && letter(p.cpt(pos + 1))) {
        return 1 + run(p, pos + 1, letter);
      }
      return run(p, pos, letter);
    case Step::kSpacePunct:  // \s?\p{P}+
      if (space(c) && pos + 1 < p.end() && punct(p.cpt(pos + 1))) {
        return 1 + run(p, pos + 1, punct);
      }
      return run(p, pos, punct);
    case Step::kCjk:
      return run(p, pos, in_cjk_class);
    case Step::kGpt2:
    case Step::kLlama3:
    case Step::kQwen2:
      break;
  }
  return 0;
}

// std::regex_iterator over the piece: leftmost matches, each a word, and the gaps between
// them kept as words too (llama.cpp's unicode_regex_split_stl).
void split_regex(Step step, Piece& p) {
  size_t pos = p.ini();
  while (pos < p.end()) {
    const size_t n = match_at(step, p, pos);
    if (n == 0) {
      pos++;
      continue;
    }
    p.add(pos);      // gap before the match
    p.add(pos + n);  // the match
    pos += n;
  }
  p.add(p.end());
}

}  // namespace

std::vector<size_t> split_offsets(std::span<const uint32_t> cpts, std::span<const Step> steps) {
  std::vector<size_t> offsets = {cpts.size()};
  for (const Step step : steps) {
    std::vector<size_t> next;
    next.reserve(offsets.size());
    size_t start = 0;
    for (const size_t len : offsets) {
      Piece piece(cpts, start, start + len, &next);
      switch (step) {
        case Step::kGpt2:
          split_gpt2(piece);
          break;
        case Step::kLlama3:
          split_llama3(piece, 3);
          break;
        case Step::kQwen2:
          split_llama3(piece, 1);
          break;
        default:
          split_regex(step, piece);
          break;
      }
      start += len;
    }
    offsets = std::move(next);
  }
  return offsets;
}

std::vector<std::string> split_words(std::string_view text, std::span<const Step> steps) {
  const std::vector<uint32_t> cpts = unicode::cpts_from_utf8(text);
  const std::vector<size_t> offsets = split_offsets(cpts, steps);
  std::vector<std::string> words;
  words.reserve(offsets.size());
  size_t start = 0;
  std::string utf8;
  for (const size_t len : offsets) {
    utf8.clear();
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(&utf8, cpts[i]);
    std::string word;
    word.reserve(utf8.size() * 2);
    for (const char ch : utf8) word += unicode::byte_to_gpt2(static_cast<uint8_t>(ch));
    words.push_back(std::move(word));
    start += len;
  }
  return words;
}

}  // namespace hc::pretok
