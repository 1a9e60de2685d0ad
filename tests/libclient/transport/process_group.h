#pragma once
// Ranks as forked processes of a test (the real cross-process path), connected through a
// FileStore, and the segments a process holds. Header-only.

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "libclient/transport/shm/shm_transport.h"
#include "tests/libclient/transport/file_store.h"

namespace troika::transport::conformance {

// Files in /dev/shm named like a segment of ours. The data plane names none (its segments are
// memfds), so no process's death can leave one behind: this stays empty.
inline std::vector<std::string> NamedSegments() {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, "troika-shm")) names.push_back(entry->d_name);
  }
  closedir(dir);
  return names;
}

// The descriptors of live process `pid` open on a segment (their links in /proc/<pid>/fd).
inline std::vector<std::string> SegmentDescriptorsOf(pid_t pid) {
  std::vector<std::string> fds;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return fds;
  while (const dirent* entry = readdir(dir)) {
    char target[256] = {};
    const std::string path = absl::StrCat(fd_dir, "/", entry->d_name);
    if (readlink(path.c_str(), target, sizeof(target) - 1) > 0 &&
        absl::StartsWith(target, "/memfd:troika-shm")) {
      fds.push_back(entry->d_name);
    }
  }
  closedir(dir);
  return fds;
}

// The segments live process `pid` maps (its /proc/<pid>/maps lines naming one).
inline std::vector<std::string> SegmentMappingsOf(pid_t pid) {
  std::vector<std::string> lines;
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  for (std::string line; std::getline(maps, line);) {
    if (absl::StrContains(line, "/memfd:troika-shm")) lines.push_back(line);
  }
  return lines;
}

inline std::string MakeTempDir() {
  char path[] = "/tmp/troika-shm-test-XXXXXX";
  EXPECT_NE(mkdtemp(path), nullptr);
  return path;
}

// Ranks as forked processes, connected through a FileStore. Each runs `body` with its
// communicator and exits 0 if it recorded no test failure (1 if it did, 2 if it could not
// connect).
class ProcessGroup {
 public:
  // Connects rank r of n through `connect` (default: the shm transport).
  using Connector = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
      const CommunicatorSpec& spec, Store& store)>;

  ProcessGroup(int n, const std::function<void(Communicator&)>& body,
               absl::Duration timeout = absl::Seconds(30), Connector connect = nullptr)
      : dir_(MakeTempDir()), connect_(std::move(connect)) {
    for (int r = 0; r < n; ++r) {
      const pid_t pid = fork();
      if (pid == 0) RunRank(r, n, body, timeout);
      pids_.push_back(pid);
    }
  }

  const std::vector<pid_t>& pids() const { return pids_; }
  const std::string& dir() const { return dir_; }

  // Waits for rank r's exit code (-1: still running after `limit`, then killed).
  int Wait(int r, absl::Duration limit = absl::Seconds(120)) {
    const absl::Time deadline = absl::Now() + limit;
    int status = 0;
    while (waitpid(pids_[r], &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pids_[r], SIGKILL);
        waitpid(pids_[r], &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Every rank's exit code.
  std::vector<int> WaitAll(absl::Duration limit = absl::Seconds(120)) {
    std::vector<int> codes;
    for (size_t r = 0; r < pids_.size(); ++r) codes.push_back(Wait(static_cast<int>(r), limit));
    return codes;
  }

 private:
  [[noreturn]] void RunRank(int r, int n, const std::function<void(Communicator&)>& body,
                            absl::Duration timeout) {
    FileStore store(dir_);
    const CommunicatorSpec spec{.rank = r, .size = n, .store_prefix = "proc/", .timeout = timeout};
    auto comm = connect_ ? connect_(spec, store) : ShmTransport().Connect(spec, store);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, comm.status().ToString().c_str());
      _exit(2);
    }
    body(**comm);
    comm->reset();
    std::fflush(stdout);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }

  const std::string dir_;
  const Connector connect_;
  std::vector<pid_t> pids_;
};

}  // namespace troika::transport::conformance
