// UTF-8 and code point helpers for the tokenizers, with llama.cpp's exact conventions
// (invalid UTF-8 becomes U+FFFD one byte at a time; categories from the generated tables;
// GPT-2's byte <-> printable code point mapping for byte-level BPE).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hc::unicode {

// Category bits, as llama.cpp's unicode_cpt_flags. Exactly one of the low 8 bits is set for
// every code point below 0x110000 (kUndefined for unassigned ones); kWhitespace is extra.
enum CptFlags : uint16_t {
  kUndefined = 0x0001,
  kNumber = 0x0002,       // \p{N}
  kLetter = 0x0004,       // \p{L}
  kSeparator = 0x0008,    // \p{Z}
  kAccentMark = 0x0010,   // \p{M}
  kPunctuation = 0x0020,  // \p{P}
  kSymbol = 0x0040,       // \p{S}
  kControl = 0x0080,      // \p{C} without unassigned code points
  kCategoryMask = 0x00FF,
  kWhitespace = 0x0100,  // \s (Unicode White_Space)
};

constexpr uint32_t kReplacementChar = 0xFFFD;

// Category flags | kWhitespace. Code points past U+10FFFF are kUndefined.
uint16_t cpt_flags(uint32_t cpt);
// First code point of the lowercase mapping; `cpt` itself when it has none.
uint32_t to_lower(uint32_t cpt);

// Byte length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes),
// without validating what follows (llama.cpp's unicode_len_utf8).
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes UTF-8; every byte that does not start a well-formed sequence yields U+FFFD.
std::vector<uint32_t> cpts_from_utf8(std::string_view s);
void append_utf8(std::string* out, uint32_t cpt);  // cpt must be <= 0x10FFFF

// GPT-2 byte-level encoding: byte -> UTF-8 of its printable stand-in code point, and back
// (-1 when `cpt` is not one of the 256 stand-ins).
const std::string& byte_to_gpt2(uint8_t byte);
int gpt2_to_byte(uint32_t cpt);

}  // namespace hc::unicode
