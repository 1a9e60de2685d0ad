#pragma once
// Makes Abseil's --help list the flags of the calling binary's main file. Abseil matches
// only files named after the binary by default, and ours are all main.cc-like names.
// Header-only; the binary links absl::flags_usage.

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace troika {

// `main_file`: the path suffix of the file defining the flags, e.g. "coordinator/main.cc".
inline void ShowFlagsOf(const char* main_file) {
  absl::FlagsUsageConfig usage;
  usage.contains_helpshort_flags = [main_file](absl::string_view file) {
    return absl::EndsWith(file, main_file);
  };
  usage.contains_help_flags = usage.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(usage);
}

}  // namespace troika
