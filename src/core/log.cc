#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvserve {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("KVSERVE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<LogLevel>& Level() {
  static std::atomic<LogLevel> level{LevelFromEnv()};
  return level;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
  }
  return '?';
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(level); }
LogLevel GetLogLevel() { return Level().load(); }

void LogLine(LogLevel level, std::string_view file, int line, std::string_view message) {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  size_t slash = file.rfind('/');
  std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  std::string out = fmt::format("{} {}.{:03d} {}:{}] {}\n", LevelLetter(level), stamp,
                                static_cast<int>(ms % 1000), base, line, message);
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace kvserve
