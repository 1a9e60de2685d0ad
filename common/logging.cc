#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace troika {
namespace {

std::atomic<int> min_severity{static_cast<int>(LogSeverity::kInfo)};

char SeverityLetter(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return 'D';
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
    case LogSeverity::kFatal:
      return 'F';
  }
  return '?';
}

const char* BaseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { min_severity = static_cast<int>(severity); }
LogSeverity MinLogSeverity() { return static_cast<LogSeverity>(min_severity.load()); }

bool ParseLogSeverity(std::string_view text, LogSeverity* severity) {
  std::string t = absl::AsciiStrToLower(std::string(text));
  if (t == "debug")
    *severity = LogSeverity::kDebug;
  else if (t == "info")
    *severity = LogSeverity::kInfo;
  else if (t == "warning")
    *severity = LogSeverity::kWarning;
  else if (t == "error")
    *severity = LogSeverity::kError;
  else
    return false;
  return true;
}

LogMessage::LogMessage(const char* file, int line, LogSeverity severity) : severity_(severity) {
  stream_ << SeverityLetter(severity)
          << absl::FormatTime("%m%d %H:%M:%E6S ", absl::Now(), absl::LocalTimeZone())
          << BaseName(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  // One write(2) per line keeps lines whole across threads and processes.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace troika
