// Fail-fast: a rank killed by a signal, a rank exiting 1, or a killed agent ends the whole
// job in seconds, with the reason, on every rank — never a hang. Real processes throughout:
// troikarun, two troika-agent processes with two ranks each.

#include <signal.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

// rank -> the unix ms at which it printed `marker` ("error-at", "exit-at").
std::map<int, int64_t> MarkerTimes(const std::string& out, const std::string& marker) {
  std::map<int, int64_t> times;
  std::regex line("\\[(\\d+)\\] " + marker + " (\\d+)");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    int rank = std::stoi((*it)[1]);
    int64_t ms = std::stoll((*it)[2]);
    if (!times.count(rank)) times[rank] = ms;
  }
  return times;
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeScratchDir("fault"); }

  // Starts troikarun with 2 agents x 2 ranks of the fault rank; waits until every rank has
  // run a few steps.
  void StartJob(const std::string& extra_env = "") {
    std::string command =
        absl::StrCat("FAULT_DIR=", dir_, " ", extra_env, " exec ", TROIKARUN_BINARY,
                     " -np 4 --nproc-per-node 2 --grace_period 3s -- ", FAULT_RANK_BINARY, " >",
                     dir_, "/stdout 2>", dir_, "/stderr");
    troikarun_ = StartShell(command);
  }

  bool WaitForRankPids(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (ReadRankPids(dir_, kRanks).size() == kRanks) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  std::vector<pid_t> ReadPids(const std::string& prefix) {
    std::vector<pid_t> pids;
    for (int r = 0; r < kRanks; ++r) {
      int64_t pid = 0;
      std::string text = ReadFile(absl::StrCat(dir_, "/", prefix, ".", r));
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid)) pids.push_back(pid);
    }
    return pids;
  }

  // Waits for troikarun (a not-hung bound: how soon the others learn is ExpectErrorsOnSurvivors'
  // to check); then every rank and agent must be gone.
  void ExpectEverythingGoneWithin(absl::Duration timeout, int* exit_code) {
    *exit_code = WaitWithTimeout(troikarun_, timeout);
    EXPECT_NE(*exit_code, -1) << "troikarun still running after " << timeout;
    for (pid_t pid : ReadPids("pid")) EXPECT_TRUE(ProcessGone(pid)) << "rank pid " << pid;
    for (pid_t pid : ReadPids("ppid")) EXPECT_TRUE(ProcessGone(pid)) << "agent pid " << pid;
  }

  // Every rank but `except` reported an error within 5 s of `t0_ms`.
  void ExpectErrorsOnSurvivors(int64_t t0_ms, const std::vector<int>& survivors) {
    std::string out = ReadFile(dir_ + "/stdout");
    std::map<int, int64_t> errors = MarkerTimes(out, "error-at");
    for (int r : survivors) {
      ASSERT_TRUE(errors.count(r)) << "rank " << r << " saw no error:\n" << out;
      EXPECT_LE(errors[r] - t0_ms, 5000) << "rank " << r << " learned too late";
    }
  }

  std::string dir_;
  pid_t troikarun_ = -1;
};

TEST_F(FaultTest, KilledRankFailsEveryOtherRankWithinFiveSeconds) {
  StartJob();
  ASSERT_TRUE(WaitForRankPids(absl::Seconds(60))) << ReadFile(dir_ + "/stderr");
  const int64_t t0 = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(ReadPids("pid")[2], SIGKILL), 0);
  int exit_code;
  ExpectEverythingGoneWithin(absl::Seconds(60), &exit_code);
  EXPECT_EQ(exit_code, 128 + SIGKILL);
  std::string all = ReadFile(dir_ + "/stdout") + ReadFile(dir_ + "/stderr");
  EXPECT_THAT(all, HasSubstr("rank 2"));
  EXPECT_THAT(all, HasSubstr("signal 9"));
  ExpectErrorsOnSurvivors(t0, {0, 1, 3});
  // The survivors' errors name the failed rank and its signal.
  EXPECT_THAT(ReadFile(dir_ + "/stdout"), HasSubstr("rank 2 on"));
}

TEST_F(FaultTest, RankExitingOneFailsEveryOtherRankWithinFiveSeconds) {
  StartJob("FAULT_EXIT_RANK=1");
  int exit_code;
  ExpectEverythingGoneWithin(absl::Seconds(60), &exit_code);
  EXPECT_EQ(exit_code, 1);
  std::string out = ReadFile(dir_ + "/stdout");
  std::map<int, int64_t> exits = MarkerTimes(out, "exit-at");
  ASSERT_TRUE(exits.count(1)) << out;
  ExpectErrorsOnSurvivors(exits[1], {0, 2, 3});
  EXPECT_THAT(out + ReadFile(dir_ + "/stderr"), HasSubstr("rank 1 on"));
  EXPECT_THAT(out + ReadFile(dir_ + "/stderr"), HasSubstr("exited with code 1"));
}

TEST_F(FaultTest, KilledAgentFailsTheOtherNodesRanksWithinFiveSeconds) {
  StartJob();
  ASSERT_TRUE(WaitForRankPids(absl::Seconds(60))) << ReadFile(dir_ + "/stderr");
  const int64_t t0 = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(ReadPids("ppid")[3], SIGKILL), 0);  // the agent of ranks 2 and 3
  int exit_code;
  ExpectEverythingGoneWithin(absl::Seconds(60), &exit_code);
  EXPECT_NE(exit_code, 0);
  ExpectErrorsOnSurvivors(t0, {0, 1});
}

// Starts troika-coordinator with `flags`; returns its pid and sets `address`.
pid_t StartCoordinator(const std::string& dir, const std::string& flags, std::string* address) {
  pid_t pid = StartShell(
      absl::StrCat("exec ", COORDINATOR_BINARY, " --listen=127.0.0.1:0 --plaintext ", flags,
                   " --port_file=", dir, "/port >", dir, "/coordinator.log 2>&1"));
  std::string port;
  for (absl::Time deadline = absl::Now() + absl::Seconds(20);
       port.empty() && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
    port = std::string(absl::StripAsciiWhitespace(ReadFile(dir + "/port")));
  }
  *address = port.empty() ? "" : "127.0.0.1:" + port;
  return pid;
}

TEST(LivenessTest, FrozenAgentIsDetectedWithinTheLivenessTimeout) {
  // A link cut looks like this to the coordinator: the agent's connection stays open but
  // nothing answers. SIGSTOP freezes the agent of ranks 2-3; the coordinator must notice
  // within its --liveness_timeout (2 s here) and abort the job for ranks 0-1.
  const std::string dir = MakeScratchDir("liveness");
  std::string address;
  pid_t coordinator = StartCoordinator(dir, "--liveness_timeout=2s", &address);
  ASSERT_FALSE(address.empty()) << "the coordinator did not start";
  std::vector<pid_t> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back(StartShell(absl::StrCat(
        "FAULT_DIR=", dir, " exec ", AGENT_BINARY, " --plaintext=true --coordinator=", address,
        " --job=frozen --nnodes=2 --nproc-per-node=2 --grace_period=2s --node_rank=", node, " -- ",
        FAULT_RANK_BINARY, " >", dir, "/agent", node, ".out 2>", dir, "/agent", node, ".err")));
  }
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadRankPids(dir, 4).size() < 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(ReadRankPids(dir, 4).size(), 4u) << ReadFile(dir + "/agent0.err");
  const int64_t t0 = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(agents[1], SIGSTOP), 0);
  EXPECT_NE(WaitWithTimeout(agents[0], absl::Seconds(15)), 0);
  std::map<int, int64_t> errors = MarkerTimes(ReadFile(dir + "/agent0.out"), "error-at");
  for (int r : {0, 1}) {
    ASSERT_TRUE(errors.count(r)) << "rank " << r << " saw no error\n"
                                 << ReadFile(dir + "/agent0.out") << ReadFile(dir + "/agent0.err");
    EXPECT_LE(errors[r] - t0, 5000) << "rank " << r << " learned too late";
  }
  EXPECT_THAT(ReadFile(dir + "/agent0.out"), HasSubstr("lost the connection to the coordinator"));
  kill(agents[1], SIGKILL);
  kill(agents[1], SIGCONT);
  WaitWithTimeout(agents[1], absl::Seconds(10));
  for (pid_t pid : ReadRankPids(dir, 4)) kill(pid, SIGKILL);
  kill(coordinator, SIGTERM);
  EXPECT_EQ(WaitWithTimeout(coordinator, absl::Seconds(10)), 0);
}

TEST(TwoJobsTest, AbortingOneJobLeavesTheOtherUntouched) {
  // One coordinator process; job "doomed" (2 agents x 2 ranks) aborts when its rank 1 exits
  // 1, while job "steady" (2 agents x 1 rank) trains to the end at the same time.
  const std::string dir = MakeScratchDir("twojobs");
  std::string address;
  pid_t coordinator = StartCoordinator(dir, "", &address);
  ASSERT_FALSE(address.empty()) << "the coordinator did not start";
  // troikarun's agents reach an external coordinator as its environment says (plaintext here).
  pid_t steady = StartShell(
      absl::StrCat("TROIKA_PLAINTEXT=1 exec ", TROIKARUN_BINARY, " --coordinator ", address,
                   " --job steady -np 2 ", "--nproc-per-node 1 -- ", EXAMPLE_TRAIN_BINARY,
                   " --steps 400 >", dir, "/steady.out 2>", dir, "/steady.err"));
  pid_t doomed = StartShell(
      absl::StrCat("TROIKA_PLAINTEXT=1 FAULT_EXIT_RANK=1 exec ", TROIKARUN_BINARY,
                   " --coordinator ", address, " --job doomed -np 4 --nproc-per-node 2 -- ",
                   FAULT_RANK_BINARY, " >", dir, "/doomed.out 2>", dir, "/doomed.err"));
  EXPECT_EQ(WaitWithTimeout(doomed, absl::Seconds(60)), 1) << ReadFile(dir + "/doomed.err");
  EXPECT_EQ(WaitWithTimeout(steady, absl::Seconds(120)), 0) << ReadFile(dir + "/steady.err");
  EXPECT_THAT(ReadFile(dir + "/steady.out"), HasSubstr("step 400 loss"));
  EXPECT_THAT(ReadFile(dir + "/doomed.out") + ReadFile(dir + "/doomed.err"),
              HasSubstr("rank 1 on"));
  kill(coordinator, SIGTERM);
  EXPECT_EQ(WaitWithTimeout(coordinator, absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace troika::testing
