// Small helpers the performance model's files share (not part of its interface): units, number
// formatting for error messages, and error prefixes.
#pragma once
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/status.h"

namespace hc::perfmodel::detail {

constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;
constexpr uint64_t kGiB = uint64_t{1} << 30;

inline std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

inline bool finite_pos(double v) { return std::isfinite(v) && v > 0; }

// r, its error prefixed with "<what>: layer <l>: ".
template <class T>
Result<T> in_layer(Result<T> r, const char* what, size_t l) {
  if (!r.ok())
    return Status::Error(std::string(what) + ": layer " + std::to_string(l) + ": " + r.message());
  return r;
}

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline uint64_t round_bytes(double b) { return static_cast<uint64_t>(std::llround(b)); }

}  // namespace hc::perfmodel::detail
