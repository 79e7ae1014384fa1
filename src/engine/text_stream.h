// Turns generated token pieces into text that is safe to send at once: complete UTF-8 only
// (a multi-byte character split across tokens is held back until it completes; bytes that can
// never form valid UTF-8 become U+FFFD, so JSON encoding never fails), and nothing that could
// still turn out to be the start of a stop string (OpenAI semantics: the stop string and
// everything after it are not returned).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hc {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {});

  // Appends a token's bytes; returns the text that can be emitted now (possibly empty).
  // Once a stop string completes, stopped() is true and later pushes return nothing.
  std::string push(std::string_view bytes);
  // End of generation: everything still held back (an incomplete UTF-8 tail becomes U+FFFD).
  std::string flush();
  bool stopped() const { return stopped_; }
  // Everything emitted so far.
  const std::string& text() const { return text_; }

 private:
  std::string emit(size_t n);  // sanitises and removes the first n bytes of pending_

  std::vector<std::string> stop_;
  std::string pending_;
  std::string text_;
  bool stopped_ = false;
};

// Length of the longest prefix of s that ends on a UTF-8 character boundary, treating only a
// truncated multi-byte sequence at the very end as incomplete.
size_t utf8_complete_prefix(std::string_view s);
// s with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);
bool utf8_valid(std::string_view s);

}  // namespace hc
