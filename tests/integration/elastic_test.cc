// Elastic jobs (docs/elastic.md) as users run them: troikarun --min-np, two troika-agent
// processes of two ranks each, ranks training through troika::elastic::Run
// (troika-test-elastic-rank). A rank killed with SIGKILL mid-training: the others learn it
// within 5 s, go on as 3 ranks from their last commit, finish, and end with bit-identical
// weights. Below the minimum the job aborts saying so. (Jobs without --min-np keep failing
// fast: fault_test.)

#include <signal.h>

#include <map>
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

  // troikarun -np `np` --nproc-per-node 2 --min-np `min_np` of the elastic rank, `steps`
  // steps of 10 ms.
  void Start(int np, int min_np, int steps) {
    troikarun_ = StartShell(absl::StrCat(
        "ELASTIC_DIR=", dir_, " ELASTIC_STEPS=", steps, " ELASTIC_COMMIT_EVERY=", kCommitEvery,
        " exec ", TROIKARUN_BINARY, " -np ", np, " --nproc-per-node 2 --min-np ", min_np,
        " --grace_period 3s -- ", ELASTIC_RANK_BINARY, " >", dir_, "/stdout 2>", dir_, "/stderr"));
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
  const std::string out = Out();
  ASSERT_EQ(code, 0) << out << Err();

  // Each survivor: restored within 5 s of the kill, losing at most the commit interval.
  std::regex restored(R"(\[(\d)\] restored to step (\d+) from step (\d+) at (\d+))");
  std::map<int, int> restored_to;
  for (std::sregex_iterator it(out.begin(), out.end(), restored), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    const int to = std::stoi((*it)[2]), from = std::stoi((*it)[3]);
    restored_to[rank] = to;
    EXPECT_LE(from - to, kCommitEvery) << (*it)[0];
    EXPECT_GE(from, to) << (*it)[0];
    EXPECT_LE(std::stoll((*it)[4]) - killed_at, 5000) << "rank " << rank << " learned too late";
  }
  EXPECT_EQ(restored_to.size(), 3u) << out;
  EXPECT_EQ(restored_to.count(2), 0u) << out;

  // Every survivor finished all the steps as one of 3 ranks of generation 2, with the same
  // weights, bit for bit.
  std::regex done(R"(\[(\d)\] done steps (\d+) size (\d+) epoch (\d+) weights ([0-9a-f]+))");
  std::set<std::string> weights;
  std::set<int> finished;
  for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
    finished.insert(std::stoi((*it)[1]));
    EXPECT_EQ((*it)[2], "400") << (*it)[0];
    EXPECT_EQ((*it)[3], "3") << (*it)[0];
    EXPECT_EQ((*it)[4], "2") << (*it)[0];
    weights.insert((*it)[5]);
  }
  EXPECT_EQ(finished, (std::set<int>{0, 1, 3})) << out;
  EXPECT_EQ(weights.size(), 1u) << out;
  EXPECT_THAT(Err(), HasSubstr("rank 2 on"));
  EXPECT_THAT(Err(), HasSubstr("killed by signal 9 (Killed); the job goes on with 3 ranks as "
                               "generation 2"));
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
