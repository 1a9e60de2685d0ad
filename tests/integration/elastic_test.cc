// Elastic jobs (docs/elastic.md) as users run them: troikarun --min-np, two troika-agent
// processes of two ranks each, ranks training through troika::elastic::Run
// (troika-example-elastic). A rank killed with SIGKILL mid-training: the others learn it
// within 5 s, go on as 3 ranks from their last commit, finish, and end with bit-identical
// weights; a whole agent killed: the other node goes on alone; three losses in a row: three
// generations. Below the minimum the job aborts saying so. (Jobs without --min-np keep failing
// fast: fault_test.)

#include <signal.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kCommitEvery = 10;

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeScratchDir("elastic"); }

  // Waits until `text` is in the ranks' output; false if it is not within 60 s.
  bool WaitForOutput(const std::string& text) {
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      if (Out().find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // troikarun -np `np` --nproc-per-node 2 --min-np `min_np` of the elastic example,
  // `steps` steps of 10 ms.
  void Start(int np, int min_np, int steps) {
    troikarun_ = StartShell(absl::StrCat(
        "exec ", TROIKARUN_BINARY, " -np ", np, " --nproc-per-node 2 --min-np ", min_np,
        " --grace_period 3s -- ", EXAMPLE_ELASTIC_BINARY, " --pid_dir=", dir_, " --steps=", steps,
        " --commit_every=", kCommitEvery, " >", dir_, "/stdout 2>", dir_, "/stderr"));
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

  // Exactly `ranks` (by their first numbers) finished all `steps` steps as `size` ranks of
  // generation 2, with the same weights, bit for bit.
  void ExpectFinishedIdentical(const std::set<int>& ranks, int steps, int size) {
    const std::string out = Out();
    std::regex done(R"(\[(\d)\] done steps (\d+) size (\d+) epoch (\d+) weights ([0-9a-f]+))");
    std::set<std::string> weights;
    std::set<int> finished;
    for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
      finished.insert(std::stoi((*it)[1]));
      EXPECT_EQ(std::stoi((*it)[2]), steps) << (*it)[0];
      EXPECT_EQ(std::stoi((*it)[3]), size) << (*it)[0];
      EXPECT_EQ((*it)[4], "2") << (*it)[0];
      weights.insert((*it)[5]);
    }
    EXPECT_EQ(finished, ranks) << out;
    EXPECT_EQ(weights.size(), 1u) << out;
  }

  std::string Out() { return ReadFile(dir_ + "/stdout"); }
  std::string Err() { return ReadFile(dir_ + "/stderr"); }

  std::string dir_;
  pid_t troikarun_ = -1;
};

TEST_F(ElasticTest, AKilledRanksSurvivorsGoOnFromTheirLastCommitAndEndIdentical) {
  Start(4, 2, 400);
  const pid_t victim = WaitForPid(2);
  ASSERT_NE(victim, 0) << Err();
  absl::SleepFor(absl::Milliseconds(300));  // mid-training
  const int64_t killed_at = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = WaitWithTimeout(troikarun_, absl::Seconds(90));
  ASSERT_EQ(code, 0) << Out() << Err();
  ExpectRestoredWithin5s(killed_at, {0, 1, 3});
  ExpectFinishedIdentical({0, 1, 3}, 400, 3);
  EXPECT_THAT(Err(), HasSubstr("rank 2 on"));
  EXPECT_THAT(Err(), HasSubstr("killed by signal 9 (Killed); the job goes on with 3 ranks as "
                               "generation 2"));
}

TEST_F(ElasticTest, AKilledAgentsNodeIsLostAndTheOtherNodeGoesOn) {
  Start(4, 2, 400);
  const pid_t rank3 = WaitForPid(3);
  ASSERT_NE(rank3, 0) << Err();
  const pid_t agent = ParentOf(rank3);  // the agent of ranks 2 and 3
  ASSERT_GT(agent, 1);
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t killed_at = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  const int code = WaitWithTimeout(troikarun_, absl::Seconds(90));
  ASSERT_EQ(code, 0) << Out() << Err();
  ExpectRestoredWithin5s(killed_at, {0, 1});
  ExpectFinishedIdentical({0, 1}, 400, 2);
  EXPECT_THAT(Err(), HasSubstr("ranks 2-3 lost the connection to the coordinator; the job goes "
                               "on with 2 ranks as generation 2"));
  EXPECT_THAT(Err(), HasSubstr("troikarun: the job finished; it went on after agent 1 was "
                               "killed by signal 9 (Killed)"));
  EXPECT_TRUE(ProcessGone(rank3)) << "the lost node's ranks do not outlive troikarun";
}

TEST_F(ElasticTest, EachOfSeveralLossesEndsAGenerationAndTheLastSurvivorsFinish) {
  Start(6, 2, 600);
  ASSERT_NE(WaitForPid(5), 0) << Err();
  std::vector<pid_t> pids = ReadRankPids(dir_, 6);
  ASSERT_EQ(pids.size(), 6u);
  // Ranks 5, 2 and 0 as they started, one after another, each once the generation before
  // has run a step: generations 2, 3 and 4.
  int generation = 1;
  for (int victim : {5, 2, 0}) {
    ASSERT_EQ(kill(pids[victim], SIGKILL), 0);
    ++generation;
    ASSERT_TRUE(WaitForOutput(absl::StrCat("generation ", generation, " first step")))
        << "generation " << generation << " never ran a step\n"
        << Out() << Err();
  }
  const int code = WaitWithTimeout(troikarun_, absl::Seconds(90));
  ASSERT_EQ(code, 0) << Out() << Err();
  std::regex done(R"(\[(\d)\] done steps 600 size 3 epoch 4 weights ([0-9a-f]+))");
  std::set<int> finished;
  std::set<std::string> weights;
  const std::string out = Out();
  for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
    finished.insert(std::stoi((*it)[1]));
    weights.insert((*it)[2]);
  }
  EXPECT_EQ(finished, (std::set<int>{1, 3, 4})) << out;
  EXPECT_EQ(weights.size(), 1u) << out;
  for (const char* change : {"the job goes on with 5 ranks as generation 2",
                             "the job goes on with 4 ranks as generation 3",
                             "the job goes on with 3 ranks as generation 4"}) {
    EXPECT_THAT(Err(), HasSubstr(change));
  }
}

TEST_F(ElasticTest, ALossBelowTheMinimumAbortsTheJobSayingSo) {
  Start(2, 2, 100000);
  const pid_t victim = WaitForPid(1);
  ASSERT_NE(victim, 0) << Err();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = WaitWithTimeout(troikarun_, absl::Seconds(30));
  EXPECT_EQ(code, 128 + SIGKILL) << Out() << Err();
  EXPECT_THAT(Err(), HasSubstr("1 rank remains, below the job's minimum of 2"));
  EXPECT_THAT(Out(), HasSubstr("[0] error ABORTED: job '"));
}

}  // namespace
}  // namespace troika::testing
