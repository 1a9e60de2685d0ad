#pragma once
// A small line logger for humans: "I1121 12:30:01.123456 coordinator.cc:42] message".
// Lines go to stderr, written whole (one write per line), so lines of concurrent threads and
// processes do not interleave. Thread-safe.
//
//   TROIKA_LOG(INFO) << "job " << name << " attached";
//   TROIKA_CHECK(ptr != nullptr) << "why this cannot happen";  // aborts the process

#include <sstream>
#include <string_view>

namespace troika {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Lines below this severity are dropped. Default kInfo; set once at start-up (main).
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();
// Parses "debug", "info", "warning", "error"; false if unknown.
bool ParseLogSeverity(std::string_view text, LogSeverity* severity);

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();  // emits the line; aborts after a kFatal one
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream when a line is filtered out.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace troika

#define TROIKA_LOG_SEVERITY_DEBUG ::troika::LogSeverity::kDebug
#define TROIKA_LOG_SEVERITY_INFO ::troika::LogSeverity::kInfo
#define TROIKA_LOG_SEVERITY_WARNING ::troika::LogSeverity::kWarning
#define TROIKA_LOG_SEVERITY_ERROR ::troika::LogSeverity::kError
#define TROIKA_LOG_SEVERITY_FATAL ::troika::LogSeverity::kFatal

#define TROIKA_LOG(severity)                                    \
  (TROIKA_LOG_SEVERITY_##severity < ::troika::MinLogSeverity()) \
      ? (void)0                                                 \
      : ::troika::LogVoidify() &                                \
            ::troika::LogMessage(__FILE__, __LINE__, TROIKA_LOG_SEVERITY_##severity).stream()

#define TROIKA_CHECK(condition)                                                              \
  (condition)                                                                                \
      ? (void)0                                                                              \
      : ::troika::LogVoidify() &                                                             \
            ::troika::LogMessage(__FILE__, __LINE__, ::troika::LogSeverity::kFatal).stream() \
                << "Check failed: " #condition " "
