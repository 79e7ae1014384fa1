#include "engine/text_stream.h"

#include <algorithm>

namespace hc {

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is malformed, or
// -1 if it is a valid start cut short by the end of s.
int utf8_seq(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  int n;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    const unsigned x = b(i + k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return 0;
  }
  return n;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = utf8_seq(s, i);
    if (n < 0) return i;  // a truncated character at the end
    i += n > 0 ? static_cast<size_t>(n) : 1;
  }
  return s.size();
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_seq(s, i);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return out;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_seq(s, i);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

TextStream::TextStream(std::vector<std::string> stop) {
  for (std::string& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

std::string TextStream::emit(size_t n) {
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  text_ += out;
  return out;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  pending_.append(bytes);
  // A stop string can only complete inside pending_: any text that could begin one is held.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = emit(first);
    pending_.clear();
    return out;
  }
  size_t hold = 0;  // longest suffix of pending_ that is a proper prefix of a stop string
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const size_t n = std::min(pending_.size() - hold, utf8_complete_prefix(pending_));
  return emit(n);
}

std::string TextStream::flush() {
  if (stopped_) return {};
  return emit(pending_.size());
}

}  // namespace hc
