// Logging to stderr (stdout is reserved for program output such as generated text).
#pragma once
#include <cstdarg>

namespace hc {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
void set_log_level(LogLevel level);
LogLevel log_level();
void log_msg(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace hc

#define HC_LOG_ERROR(...) ::hc::log_msg(::hc::LogLevel::kError, __VA_ARGS__)
#define HC_LOG_WARN(...) ::hc::log_msg(::hc::LogLevel::kWarn, __VA_ARGS__)
#define HC_LOG_INFO(...) ::hc::log_msg(::hc::LogLevel::kInfo, __VA_ARGS__)
#define HC_LOG_DEBUG(...) ::hc::log_msg(::hc::LogLevel::kDebug, __VA_ARGS__)
