#pragma once
// Helpers for tests that run troikarun and the example as real processes: a scratch
// directory, running a shell command with its output captured in files and a time bound,
// and checking that processes are gone. Header-only.
//
// Thread contract: single-threaded tests.

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace troika::testing {

// A fresh directory under the test temp dir. Not removed (kept for post-mortems).
inline std::string MakeScratchDir(const std::string& name) {
  std::string pattern = absl::StrCat(::testing::TempDir(), "/", name, "-XXXXXX");
  char* dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr) << "mkdtemp " << pattern;
  return pattern;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts `/bin/sh -c command` in its own process group. Use "exec ..." to make the pid the
// program's own. Unless the environment already has one, the command gets a job token
// (TROIKA_JOB_TOKEN): every agent and rank these tests start for a job then carries the same.
inline pid_t StartShell(const std::string& command) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    setenv("TROIKA_JOB_TOKEN", "launcher-test-job-token", /*overwrite=*/0);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `timeout`. Returns its shell-style status (exit code, or 128 + the
// signal), or -1 if it was still running: it and its process group are then killed.
inline int WaitWithTimeout(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    if (r < 0 && errno != EINTR) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

struct CommandResult {
  int exit_code = -1;  // shell-style; -1: timed out (and killed)
  std::string out;
  std::string err;
  absl::Duration elapsed;
};

// Runs `command` with stdout and stderr captured in `dir`.
inline CommandResult RunShell(const std::string& command, const std::string& dir,
                              absl::Duration timeout) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const absl::Time start = absl::Now();
  CommandResult result;
  result.exit_code =
      WaitWithTimeout(StartShell(absl::StrCat(command, " >", out, " 2>", err)), timeout);
  result.elapsed = absl::Now() - start;
  result.out = ReadFile(out);
  result.err = ReadFile(err);
  return result;
}

// True once no process has this pid (a zombie still counts as present).
inline bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// The pids that ranks wrote to dir/pid.<rank> ("echo $$ > ...").
inline std::vector<pid_t> ReadRankPids(const std::string& dir, int ranks) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < ranks; ++rank) {
    std::ifstream in(absl::StrCat(dir, "/pid.", rank));
    pid_t pid = 0;
    if (in >> pid) pids.push_back(pid);
  }
  return pids;
}

// The weights troika-example-train wrote with --dump_weights (empty if none).
inline std::vector<double> ReadWeights(const std::string& path) {
  std::vector<double> values;
  std::istringstream in(ReadFile(path));
  for (double v; in >> v;) values.push_back(v);
  return values;
}

// Fails the test where `actual` differs from `expected` by more than 1e-5 (absolute +
// relative); example_train_test.cc explains that tolerance. Returns the number of mismatches.
inline int ExpectSameWeights(const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::string& what) {
  EXPECT_EQ(actual.size(), expected.size()) << what;
  if (actual.size() != expected.size()) return -1;
  int mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::fabs(expected[i] - actual[i]) > 1e-5 + 1e-5 * std::fabs(expected[i])) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << ", weight " << i << ": " << actual[i] << " vs " << expected[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
  return mismatches;
}

}  // namespace troika::testing
