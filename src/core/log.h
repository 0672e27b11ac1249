// Logging with levels. One line per message, to stderr, prefixed with the level.
#pragma once
#include "core/error.h"

namespace zt {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug|info|warn|error|off"; throws BadInput otherwise.
LogLevel parse_log_level(const std::string& name);
void log_line(LogLevel level, const std::string& message);

}  // namespace zt

#define ZT_LOG(level, ...)                                                                                             \
  do {                                                                                                                 \
    if (static_cast<int>(level) >= static_cast<int>(::zt::log_level())) ::zt::log_line(level, ::zt::str(__VA_ARGS__)); \
  } while (0)
#define ZT_DEBUG(...) ZT_LOG(::zt::LogLevel::Debug, __VA_ARGS__)
#define ZT_INFO(...) ZT_LOG(::zt::LogLevel::Info, __VA_ARGS__)
#define ZT_WARN(...) ZT_LOG(::zt::LogLevel::Warn, __VA_ARGS__)
