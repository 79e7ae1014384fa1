#include "core/log.h"

#include <atomic>
#include <cstdio>

namespace hc {

namespace {
// Process-wide verbosity is configuration set once by the front end, not backend state.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_msg(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) > g_level.load()) return;
  static const char* kTag[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "hotcold %s: ", kTag[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

}  // namespace hc
