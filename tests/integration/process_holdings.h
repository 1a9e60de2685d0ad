#pragma once
// What a running process holds, read from /proc: for the tests that check that joins, losses
// and reinitialisations leak no threads, descriptors or memory (elastic_test, and
// troika-test-reinit-rank under reinit_test). Header-only, no gtest: the rank program uses it.

#include <dirent.h>
#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace troika::testing {

// `threads` counts a process's threads but those of gRPC's pools (named default-executor and
// event_engine), which gRPC grows and shrinks with the load within bounds of its own: a
// coordinator read 11 threads in all in round 1 and 14 in each round after, in one run of 25.
// A leaked channel, server or completion queue shows in `fds`.
struct Holdings {
  int threads = 0, fds = 0;
  int64_t rss_kib = 0;
};

// What `pid` holds now; zeros for what cannot be read (a process that is gone).
inline Holdings HoldingsOf(pid_t pid) {
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  static const std::set<std::string> kGrpcPools = {"default-executo", "event_engine"};
  Holdings h;
  if (DIR* dir = opendir(absl::StrCat("/proc/", pid, "/task").c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string comm = read(absl::StrCat("/proc/", pid, "/task/", entry->d_name, "/comm"));
      h.threads += !kGrpcPools.count(std::string(absl::StripAsciiWhitespace(comm)));
    }
    closedir(dir);
  }
  std::istringstream status(read(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::string kib = line.substr(6);
      absl::SimpleAtoi(absl::StripAsciiWhitespace(kib.substr(0, kib.find(" kB"))), &h.rss_kib);
    }
  }
  if (DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str())) {
    while (dirent* entry = readdir(dir)) h.fds += entry->d_name[0] != '.';
    closedir(dir);
  }
  return h;
}

}  // namespace troika::testing
