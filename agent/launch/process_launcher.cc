#include "agent/launch/process_launcher.h"

#include <string.h>

#include <string>

namespace troika::agent {

std::string SignalDescription(int signal) {
  // sigdescr_np, unlike strsignal, is thread-safe and never localized.
  const char* description = sigdescr_np(signal);
  std::string text = "signal " + std::to_string(signal);
  if (description != nullptr) text += std::string(" (") + description + ")";
  return text;
}

std::string ExitStatus::ToString() const {
  if (signal != 0) return "was killed by " + SignalDescription(signal);
  return "exited with code " + std::to_string(code);
}

}  // namespace troika::agent
