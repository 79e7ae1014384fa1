#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_data.h"

namespace hc::unicode {

namespace {

bool is_whitespace(uint32_t cpt) {
  const uint32_t* begin = unicode_data::kWhitespace;
  const uint32_t* end = begin + unicode_data::kNumWhitespace;
  return std::binary_search(begin, end, cpt);
}

uint16_t category_flags(uint32_t cpt) {
  using unicode_data::FlagRange;
  const FlagRange* begin = unicode_data::kFlagRanges;
  const FlagRange* end = begin + unicode_data::kNumFlagRanges;
  // Last range whose start <= cpt.
  const FlagRange* it =
      std::upper_bound(begin, end, cpt, [](uint32_t c, const FlagRange& r) { return c < r.start; });
  return it == begin ? static_cast<uint16_t>(kUndefined) : (it - 1)->flags;
}

// Flags of the ASCII range, looked up once: the pre-tokenizers ask for them constantly.
const std::array<uint16_t, 128>& ascii_flags() {
  static const std::array<uint16_t, 128> table = [] {
    std::array<uint16_t, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) {
      t[c] = category_flags(c) | (is_whitespace(c) ? kWhitespace : 0);
    }
    return t;
  }();
  return table;
}

// Printable stand-in code point for each byte, as GPT-2's bytes_to_unicode().
std::array<uint32_t, 256> gpt2_byte_cpts() {
  std::array<uint32_t, 256> cpts{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cpts[b] = printable ? b : 256 + n++;
  }
  return cpts;
}

}  // namespace

uint16_t cpt_flags(uint32_t cpt) {
  if (cpt < 128) return ascii_flags()[cpt];
  if (cpt >= 0x110000) return kUndefined;
  return category_flags(cpt) | (is_whitespace(cpt) ? kWhitespace : 0);
}

uint32_t to_lower(uint32_t cpt) {
  using unicode_data::CaseMapping;
  const CaseMapping* begin = unicode_data::kLowercase;
  const CaseMapping* end = begin + unicode_data::kNumLowercase;
  const CaseMapping* it = std::lower_bound(
      begin, end, cpt, [](const CaseMapping& m, uint32_t c) { return m.from < c; });
  return (it != end && it->from == cpt) ? it->to : cpt;
}

std::vector<uint32_t> cpts_from_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b0 = byte(i);
    // Same acceptance rules as llama.cpp's unicode_cpt_from_utf8 (no overlong or surrogate
    // checks); sequences beyond U+10FFFF, which llama.cpp cannot re-encode, become U+FFFD.
    uint32_t cpt = kReplacementChar;
    size_t len = 1;
    if (b0 < 0x80) {
      cpt = b0;
    } else if ((b0 & 0xE0) == 0xC0 && cont(i + 1)) {
      cpt = ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
      len = 2;
    } else if ((b0 & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      cpt = ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
      len = 3;
    } else if ((b0 & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      cpt = ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) |
            (byte(i + 3) & 0x3Fu);
      len = 4;
      if (cpt > 0x10FFFF) {
        cpt = kReplacementChar;
        len = 1;
      }
    }
    out.push_back(cpt);
    i += len;
  }
  return out;
}

void append_utf8(std::string* out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

const std::string& byte_to_gpt2(uint8_t byte) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    const std::array<uint32_t, 256> cpts = gpt2_byte_cpts();
    for (size_t b = 0; b < 256; ++b) append_utf8(&t[b], cpts[b]);
    return t;
  }();
  return table[byte];
}

int gpt2_to_byte(uint32_t cpt) {
  static const std::array<int16_t, 512> table = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    const std::array<uint32_t, 256> cpts = gpt2_byte_cpts();
    for (size_t b = 0; b < 256; ++b) t[cpts[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cpt < table.size() ? table[cpt] : -1;
}

}  // namespace hc::unicode
