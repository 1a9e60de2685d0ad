#pragma once
// ElasticTest: the fixture of the elastic-job tests (elastic_test.cc, elastic_restart_test.cc)
// — troikarun, troika-agent and troika-coordinator processes running
// troika-example-elastic, and what their ranks printed. The binaries' paths come from the
// test target's compile definitions (launcher_tests.cmake).

#include <signal.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {

inline constexpr int kCommitEvery = 10;

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeScratchDir("elastic"); }
  void TearDown() override {
    for (pid_t pid : others_) WaitWithTimeout(pid, absl::ZeroDuration());  // kills leftovers
  }

  // Waits until `text` is in the ranks' output; false if it is not within 60 s.
  bool WaitForOutput(const std::string& text) {
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      if (Out().find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // troikarun -np `np` --nproc-per-node 2 --min-np `min_np` of the elastic example,
  // `steps` steps of 10 ms (and `more` of its flags), writing the timeline to
  // dir_/trace.json.
  void Start(int np, int min_np, int steps, const std::string& more = "") {
    troikarun_ = StartShell(absl::StrCat(
        "exec ", TROIKARUN_BINARY, " -np ", np, " --nproc-per-node 2 --min-np ", min_np,
        " --timeline ", dir_, "/trace.json --grace_period 3s -- ", EXAMPLE_ELASTIC_BINARY,
        " --pid_dir=", dir_, " --steps=", steps, " --commit_every=", kCommitEvery, " ", more, " >",
        dir_, "/stdout 2>", dir_, "/stderr"));
  }

  // Waits until rank `rank` wrote its pid (it has run a few steps); 0 if it did not in time.
  pid_t WaitForPid(int rank) {
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      std::vector<pid_t> pids = ReadRankPids(dir_, rank + 1);
      if (static_cast<int>(pids.size()) == rank + 1) return pids[rank];
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  }

  static pid_t ParentOf(pid_t pid) {
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');  // "pid (comm) state ppid ..."
    int ppid = 0;
    if (paren == std::string::npos ||
        std::sscanf(stat.c_str() + paren + 1, " %*c %d", &ppid) != 1) {
      return 0;
    }
    return ppid;
  }

  // Each of `ranks` restored its last commit within 5 s of `lost_at` (unix ms), losing at
  // most the commit interval; no other rank did.
  void ExpectRestoredWithin5s(int64_t lost_at, const std::set<int>& ranks) {
    const std::string out = Out();
    std::regex restored(R"(\[(\d)\] restored to step (\d+) from step (\d+) at (\d+))");
    std::set<int> seen;
    for (std::sregex_iterator it(out.begin(), out.end(), restored), end; it != end; ++it) {
      const int rank = std::stoi((*it)[1]);
      const int to = std::stoi((*it)[2]), from = std::stoi((*it)[3]);
      seen.insert(rank);
      EXPECT_LE(from - to, kCommitEvery) << (*it)[0];
      EXPECT_GE(from, to) << (*it)[0];
      EXPECT_LE(std::stoll((*it)[4]) - lost_at, 5000) << "rank " << rank << " learned too late";
    }
    EXPECT_EQ(seen, ranks) << out;
  }

  // Exactly `ranks` (by their first numbers) finished, in `out` (default: troikarun's), all
  // `steps` steps (-1: any number) as `size` ranks of generation `epoch`, with the same
  // weights, bit for bit.
  void ExpectFinishedIdentical(const std::set<int>& ranks, int steps, int size, int epoch = 2,
                               std::string out = "") {
    if (out.empty()) out = Out();
    std::regex done(R"(\[(\d)\] done steps (\d+) size (\d+) epoch (\d+) weights ([0-9a-f]+))");
    std::set<std::string> weights;
    std::set<int> finished;
    for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
      finished.insert(std::stoi((*it)[1]));
      if (steps >= 0) {
        EXPECT_EQ(std::stoi((*it)[2]), steps) << (*it)[0];
      }
      EXPECT_EQ(std::stoi((*it)[3]), size) << (*it)[0];
      EXPECT_EQ(std::stoi((*it)[4]), epoch) << (*it)[0];
      weights.insert((*it)[5]);
    }
    EXPECT_EQ(finished, ranks) << out;
    EXPECT_EQ(weights.size(), 1u) << out;
  }

  // Waits until `text` is in the coordinator's log (dir_/coordinator.err); false if it is not
  // within 30 s.
  bool WaitForCoordinatorLog(const std::string& text) {
    for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
      if (ReadFile(dir_ + "/coordinator.err").find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  std::string Out() { return ReadFile(dir_ + "/stdout"); }
  std::string Err() { return ReadFile(dir_ + "/stderr"); }

  // A troika-coordinator of its own (plaintext, on 127.0.0.1 at `port`, 0: a free one) with
  // `flags`: its address. Its log goes to dir_/coordinator.err (appended).
  std::string StartCoordinator(const std::string& flags = "", int port = 0) {
    const std::string port_file = dir_ + "/port";
    std::remove(port_file.c_str());
    others_.push_back(StartShell(absl::StrCat(
        "exec ", COORDINATOR_BINARY, " --listen=127.0.0.1:", port,
        " --plaintext --port_file=", port_file, " ", flags, " 2>>", dir_, "/coordinator.err")));
    for (absl::Time deadline = absl::Now() + absl::Seconds(20);
         !absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) &&
         absl::Now() < deadline;) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_GT(port, 0) << ReadFile(dir_ + "/coordinator.err");
    return absl::StrCat("127.0.0.1:", port);
  }

  // troikarun of 2 ranks of `example` (`env` before it; `flags` after -np), job `job` on the
  // coordinator at `address`, which may grow to 4 ranks.
  void StartGrowable(const std::string& address, const std::string& env, const std::string& job,
                     const std::string& example, const std::string& flags = "") {
    troikarun_ =
        StartShell(absl::StrCat(env, "exec ", TROIKARUN_BINARY, " --coordinator=", address,
                                " --job=", job, " -np 2 --min-np 2 --max-np 4 ", flags, " -- ",
                                example, " >", dir_, "/stdout 2>", dir_, "/stderr"));
  }

  // A troika-agent of 2 ranks of `example` on host node-c asking to join job `job` (output in
  // dir_/agent.out and agent.err): its pid.
  pid_t StartJoiner(const std::string& address, const std::string& env, const std::string& job,
                    const std::string& example) {
    const pid_t agent = StartShell(
        absl::StrCat(env, "exec ", AGENT_BINARY, " --coordinator=", address, " --job=", job,
                     " --nnodes=1 --nproc-per-node=2 --min_np=2 --max_np=4 --host=node-c "
                     "--data_host=127.0.0.1 --socket_dir=",
                     dir_, " -- ", example, " >", dir_, "/agent.out 2>", dir_, "/agent.err"));
    others_.push_back(agent);
    return agent;
  }

  // Kills the coordinator (`pid`, at `address`) with SIGKILL and starts it again on the same
  // port with `flags`.
  void RestartCoordinator(pid_t pid, const std::string& address, const std::string& flags) {
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    WaitWithTimeout(pid, absl::Seconds(10));
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
    ASSERT_EQ(StartCoordinator(flags, port), address);
  }

  std::string dir_;
  pid_t troikarun_ = -1;
  std::vector<pid_t> others_;  // a coordinator, agents started by hand
};

}  // namespace troika::testing
