// Byte-level BPE pre-tokenizers: split text into words the way llama.cpp's
// unicode_regex_split does for each tokenizer.ggml.pre value.
//
// llama.cpp describes each pre-tokenizer as a list of regexes applied in turn, each one
// splitting every piece left by the previous one into its matches and the gaps between them.
// Some regexes (GPT-2's, llama3's, Qwen2's) run as hand-written matchers there; the others
// run through std::regex over a "collapsed" text where every non-ASCII code point is replaced
// by one byte standing for its category. Here every step is a hand-written matcher that
// reproduces that exact behaviour (tests/tokenizer compare each one with std::regex on the
// collapsed text), which also avoids std::regex's recursion depth on long inputs.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hc::pretok {

enum class Step {
  kGpt2,             // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  kLlama3,           // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                     //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,            // kLlama3 with \p{N} for \p{N}{1,3}: one digit per word
  kNumber,           // \p{N}
  kNumbers,          // \p{N}+
  kThreeDigits,      // [0-9][0-9][0-9]
  kPunctRunFalcon,   // [\p{P}\$\+<=>\^~\|`]+
  kPunctRunDefault,  // [\p{P}\$\+<=>\^~\|]+
  kNewline,          // [\r\n]
  kSpaceLetters,     // \s?\p{L}+
  kSpacePunct,       // \s?\p{P}+
  kCjk,              // [一-龥ࠀ-一가-퟿]+
};

// Pieces as code point counts over `cpts`, refined by each step in order.
std::vector<size_t> split_offsets(std::span<const uint32_t> cpts, std::span<const Step> steps);

// The words llama.cpp's unicode_regex_split returns: each piece re-encoded as UTF-8 (invalid
// input bytes became U+FFFD) and then mapped byte by byte to GPT-2's printable code points.
std::vector<std::string> split_words(std::string_view text, std::span<const Step> steps);

}  // namespace hc::pretok
