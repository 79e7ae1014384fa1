// The hand-written pre-tokenizer steps against what llama.cpp actually runs for them:
// std::regex over its "collapsed" text (one byte per non-ASCII code point standing for its
// category) or std::wregex over the code points, with the regex rewritten the same way.
#include "tokenizer/pretokenize.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace hc {
namespace {

using pretok::Step;
namespace u = unicode;

// --- a port of the relevant part of llama.cpp's unicode_regex_split ---

char collapsed_byte(uint32_t cpt) {
  if (cpt < 128) return static_cast<char>(cpt);
  const uint16_t f = u::cpt_flags(cpt);
  if (f & u::kWhitespace) return 0x0B;
  switch (f & u::kCategoryMask) {
    case u::kNumber:
      return static_cast<char>(0xD1);
    case u::kLetter:
      return static_cast<char>(0xD2);
    case u::kPunctuation:
      return static_cast<char>(0xD3);
    case u::kAccentMark:
      return static_cast<char>(0xD4);
    case u::kSymbol:
      return static_cast<char>(0xD5);
    default:
      return static_cast<char>(0xD0);
  }
}

// llama.cpp's rewrite of \p{X} into "[<category byte><ASCII members>]".
std::string collapse_regex(const std::string& re) {
  const std::vector<std::pair<std::string, std::string>> cats = {
      {"\\p{N}", "\xD1\x30-\x39"},
      {"\\p{L}", "\xD2\x41-\x5A\x61-\x7A"},
      {"\\p{P}", "\xD3\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40\\\x5B-\\\x5D\x5F\\\x7B\\\x7D"},
  };
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && re[i] == ']' && re[i - 1] != '\\') {
      out += ']';
      inside = false;
      continue;
    }
    bool replaced = false;
    for (const auto& [pat, repl] : cats) {
      if (re.compare(i, pat.size(), pat) == 0) {
        out += inside ? repl : "[" + repl + "]";
        i += pat.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += re[i];
  }
  return out;
}

template <class CharT>
std::vector<size_t> regex_split(const std::basic_string<CharT>& text,
                                const std::basic_regex<CharT>& expr,
                                const std::vector<size_t>& offsets) {
  std::vector<size_t> out;
  size_t start = 0;
  for (const size_t offset : offsets) {
    std::regex_iterator<const CharT*> it(text.data() + start, text.data() + start + offset, expr);
    std::regex_iterator<const CharT*> end;
    int64_t start_idx = 0;
    for (; it != end; ++it) {
      const auto& m = *it;
      if (m.position() > start_idx) out.push_back(m.position() - start_idx);
      out.push_back(m.length());
      start_idx = m.position() + m.length();
    }
    if (start_idx < static_cast<int64_t>(offset)) out.push_back(offset - start_idx);
    start += offset;
  }
  return out;
}

struct Reference {
  Step step;
  std::string regex;  // as in llama-vocab.cpp
  bool collapsed;     // uses \p{..}: std::regex over collapsed text, else std::wregex
};

std::vector<size_t> reference_split(const Reference& ref, const std::vector<uint32_t>& cpts,
                                    const std::vector<size_t>& offsets) {
  constexpr auto flags = std::regex_constants::optimize | std::regex_constants::nosubs;
  if (ref.collapsed) {
    std::string text;
    for (const uint32_t c : cpts) text += collapsed_byte(c);
    return regex_split(text, std::regex(collapse_regex(ref.regex), flags), offsets);
  }
  std::wstring wtext;
  for (const uint32_t c : cpts) {
    wtext += (c > 0x7F && (u::cpt_flags(c) & u::kWhitespace)) ? L'\v' : static_cast<wchar_t>(c);
  }
  std::wstring wre;
  for (const uint32_t c : u::cpts_from_utf8(ref.regex)) wre += static_cast<wchar_t>(c);
  return regex_split(wtext, std::wregex(wre, flags), offsets);
}

const std::vector<Reference>& references() {
  static const std::vector<Reference> refs = {
      {Step::kNumber, "\\p{N}", true},
      {Step::kNumbers, "\\p{N}+", true},
      {Step::kThreeDigits, "[0-9][0-9][0-9]", false},
      {Step::kPunctRunFalcon, "[\\p{P}\\$\\+<=>\\^~\\|`]+", true},
      {Step::kPunctRunDefault, "[\\p{P}\\$\\+<=>\\^~\\|]+", true},
      {Step::kNewline, "[\r\n]", false},
      {Step::kSpaceLetters, "\\s?\\p{L}+", true},
      {Step::kSpacePunct, "\\s?\\p{P}+", true},
      {Step::kCjk, "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
       false},
  };
  return refs;
}

// Code points from every category the splitters care about, ASCII weighted up.
std::vector<uint32_t> random_cpts(std::mt19937& rng, size_t n) {
  static const std::vector<uint32_t> pool = {
      0x00A0, 0x3000, 0x2000, 0x2028, 0x0085,   0x1680,  0x200B, 0x200D, 0xFEFF,  // spaces, Cf
      0x00E9, 0x00FC, 0x0416, 0x03A9, 0x05D0,   0x0628,  0x0915, 0x0E01, 0x1780,  // letters
      0x4E00, 0x6211, 0x9FA5, 0x9FA6, 0x0800,   0x3042,  0x30AB, 0xAC00, 0xD7A3,
      0xD7FF, 0x00B2, 0x00BD, 0x0660, 0x0966,   0x2160,  0x2460, 0xFF11,          // numbers
      0x00A1, 0x00BF, 0x2014, 0x2026, 0x201C,   0x3001,  0x300C, 0xFF01, 0x055D,  // punctuation
      0x00A9, 0x20AC, 0x2192, 0x2211, 0x1F600,  0x1F999, 0x2705, 0x2FFC, 0x31EF,  // symbols
      0x0301, 0x0308, 0x0903, 0x20DD,                                             // marks
      0x0378, 0xFDD0, 0x1C89, 0xE000, 0x10FFFD, 0xFFFD,                           // Cn, Co
  };
  std::vector<uint32_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      out.push_back(pool[rng() % pool.size()]);
    } else {
      out.push_back(rng() % 128);
    }
  }
  return out;
}

TEST(Pretokenize, EachRegexStepMatchesLlamaCppStdRegex) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 1500; ++iter) {
    const std::vector<uint32_t> cpts = random_cpts(rng, rng() % 40);
    for (const Reference& ref : references()) {
      const Step steps[] = {ref.step};
      const std::vector<size_t> want = reference_split(ref, cpts, {cpts.size()});
      const std::vector<size_t> got = pretok::split_offsets(cpts, steps);
      ASSERT_EQ(got, want) << "step regex " << ref.regex << " iteration " << iter;
    }
  }
}

TEST(Pretokenize, StepsRespectPieceBoundaries) {
  // Chained steps (e.g. deepseek-coder's five) must split each earlier piece separately.
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    const std::vector<uint32_t> cpts = random_cpts(rng, rng() % 40);
    std::vector<size_t> want = {cpts.size()};
    std::vector<Step> steps;
    for (const Reference& ref :
         {references()[5], references()[6], references()[7], references()[8], references()[0]}) {
      want = reference_split(ref, cpts, want);
      steps.push_back(ref.step);
    }
    ASSERT_EQ(pretok::split_offsets(cpts, steps), want) << "iteration " << iter;
  }
}

TEST(Pretokenize, Gpt2SplitsLikeTheRegex) {
  const Step gpt2[] = {Step::kGpt2};
  const auto words = pretok::split_words("Hello world's  3.14  ok\n", gpt2);
  // Byte-level: space -> U+0120, newline -> U+010A.
  const std::vector<std::string> want = {"Hello",
                                         "\xc4\xa0world",
                                         "'s",
                                         "\xc4\xa0",
                                         "\xc4\xa0"
                                         "3",
                                         ".",
                                         "14",
                                         "\xc4\xa0",
                                         "\xc4\xa0ok",
                                         "\xc4\x8a"};
  EXPECT_EQ(words, want);
}

TEST(Pretokenize, Llama3GroupsDigitsByThreeAndFoldsContractions) {
  const Step llama3[] = {Step::kLlama3};
  const auto words = pretok::split_words("1234567 I'M here\r\n\r\n", llama3);
  const std::vector<std::string> want = {
      "123", "456", "7", "\xc4\xa0I", "'M", "\xc4\xa0here", "\xc4\x8d\xc4\x8a\xc4\x8d\xc4\x8a"};
  EXPECT_EQ(words, want);
}

TEST(Pretokenize, Qwen2SplitsEveryDigitAndFoldsContractions) {
  // LLAMA_VOCAB_PRE_TYPE_QWEN2: llama3's regex with \p{N} in place of \p{N}{1,3}.
  const Step qwen2[] = {Step::kQwen2};
  std::string words;  // joined by '|'
  for (const std::string& w : pretok::split_words("1234567 I'M here\r\n\r\n", qwen2)) {
    words += w + "|";
  }
  EXPECT_EQ(words, "1|2|3|4|5|6|7|\xc4\xa0I|'M|\xc4\xa0here|\xc4\x8d\xc4\x8a\xc4\x8d\xc4\x8a|");
  // Non-ASCII numbers too (U+00BD, U+0661 U+0662); letters take one leading non-letter.
  const std::vector<uint32_t> cpts = {'x', '2', '0', 0x00BD, ' ', 0x0661, 0x0662, '$', 'a', 'b'};
  EXPECT_EQ(pretok::split_offsets(cpts, qwen2), (std::vector<size_t>{1, 1, 1, 1, 1, 1, 1, 3}));
}

TEST(Pretokenize, Qwen2IsLlama3WithSingleDigits) {
  // llama.cpp's two custom splitters differ only in the digit branch, so on any text Qwen2's
  // words are llama3's with each run of 1-3 numbers split into single code points.
  const Step llama3[] = {Step::kLlama3};
  const Step qwen2[] = {Step::kQwen2};
  std::mt19937 rng(11);
  for (int iter = 0; iter < 2000; ++iter) {
    const std::vector<uint32_t> cpts = random_cpts(rng, rng() % 40);
    std::vector<size_t> want;
    size_t start = 0;
    for (const size_t len : pretok::split_offsets(cpts, llama3)) {
      if (u::cpt_flags(cpts[start]) & u::kNumber) {
        want.insert(want.end(), len, 1);
      } else {
        want.push_back(len);
      }
      start += len;
    }
    ASSERT_EQ(pretok::split_offsets(cpts, qwen2), want) << "iteration " << iter;
  }
}

TEST(Unicode, CategoriesMatchLlamaCppTables) {
  EXPECT_EQ(u::cpt_flags('a'), u::kLetter);
  EXPECT_EQ(u::cpt_flags('7'), u::kNumber);
  EXPECT_EQ(u::cpt_flags(' '), u::kSeparator | u::kWhitespace);
  EXPECT_EQ(u::cpt_flags('\n'), u::kControl | u::kWhitespace);
  EXPECT_EQ(u::cpt_flags('$'), u::kSymbol);
  EXPECT_EQ(u::cpt_flags('_'), u::kPunctuation);
  EXPECT_EQ(u::cpt_flags(0x0378), u::kUndefined);  // unassigned
  EXPECT_EQ(u::cpt_flags(0xE000), u::kControl);    // private use counts as \p{C}
  EXPECT_EQ(u::cpt_flags(0x2FFC), u::kSymbol);     // new in Unicode 15.1
  EXPECT_EQ(u::cpt_flags(0x1C89), u::kUndefined);  // only assigned in Unicode 16
  EXPECT_EQ(u::cpt_flags(0x3000), u::kSeparator | u::kWhitespace);
  EXPECT_EQ(u::cpt_flags(0x110000), u::kUndefined);
  EXPECT_EQ(u::to_lower('Q'), static_cast<uint32_t>('q'));
  EXPECT_EQ(u::to_lower(0x0416), 0x0436u);
  EXPECT_EQ(u::to_lower('5'), static_cast<uint32_t>('5'));
}

TEST(Unicode, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(u::cpts_from_utf8("a\xc3\xa9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(u::cpts_from_utf8("\xc3"), (std::vector<uint32_t>{0xFFFD}));
  EXPECT_EQ(u::cpts_from_utf8("\x80x"), (std::vector<uint32_t>{0xFFFD, 'x'}));
  EXPECT_EQ(u::cpts_from_utf8("\xe2\x82z"), (std::vector<uint32_t>{0xFFFD, 0xFFFD, 'z'}));
  EXPECT_EQ(u::cpts_from_utf8("\xf5\x80\x80\x80"),  // beyond U+10FFFF
            (std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
}

TEST(Unicode, Gpt2ByteMapRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const std::vector<uint32_t> cpts = u::cpts_from_utf8(u::byte_to_gpt2(static_cast<uint8_t>(b)));
    ASSERT_EQ(cpts.size(), 1u);
    EXPECT_EQ(u::gpt2_to_byte(cpts[0]), b);
  }
  EXPECT_EQ(u::byte_to_gpt2(' '), "\xc4\xa0");  // U+0120
  EXPECT_EQ(u::gpt2_to_byte(0x4E00), -1);
}

}  // namespace
}  // namespace hc
