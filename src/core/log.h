// Logging to stderr: KV_LOG(INFO, "KV cache: {} tokens", n). Thread-safe (one write per line).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; KVSERVE_LOG_LEVEL=debug|info|warning|error.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, std::string_view file, int line, std::string_view message);

}  // namespace kvserve

#define KV_LOG_LEVEL_DEBUG ::kvserve::LogLevel::kDebug
#define KV_LOG_LEVEL_INFO ::kvserve::LogLevel::kInfo
#define KV_LOG_LEVEL_WARNING ::kvserve::LogLevel::kWarning
#define KV_LOG_LEVEL_ERROR ::kvserve::LogLevel::kError

#define KV_LOG(level, ...)                                                              \
  do {                                                                                  \
    if (KV_LOG_LEVEL_##level >= ::kvserve::GetLogLevel())                               \
      ::kvserve::LogLine(KV_LOG_LEVEL_##level, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
