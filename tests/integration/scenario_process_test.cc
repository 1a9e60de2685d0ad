// The scenarios of tests/integration/scenarios.h as real processes launched by troikarun:
// every rank behind an agent (one agent for all ranks, and one agent per rank).

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

void ExpectScenariosPass(int ranks, int per_node, const std::string& scenarios) {
  const std::string dir = MakeScratchDir("scenario");
  CommandResult r = RunShell(absl::StrCat(TROIKARUN_BINARY, " -np ", ranks, " --nproc-per-node ",
                                          per_node, " -- ", SCENARIO_RANK_BINARY, " ", scenarios),
                             dir, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < ranks; ++rank) {
    for (absl::string_view name : absl::StrSplit(scenarios, ' ')) {
      EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[", rank, "] scenario ", name, " ok")))
          << r.out << r.err;
    }
  }
}

constexpr char kThreeRankScenarios[] = "join-before-wait set-alltoall set-same-name";

TEST(ScenarioProcessTest, BehindOneAgent) { ExpectScenariosPass(3, 3, kThreeRankScenarios); }

TEST(ScenarioProcessTest, BehindAnAgentPerRank) { ExpectScenariosPass(3, 1, kThreeRankScenarios); }

TEST(ScenarioProcessTest, JoinBeforeWaitingOnTwoRanks) {
  ExpectScenariosPass(2, 2, "join-before-wait");
}

// A rank that exits before Init (cleanly or not) fails every other rank within seconds,
// naming it, and troikarun exits promptly: nothing waits out a data-plane timeout (300 s).
void ExpectEarlyExitEndsTheJob(int code, const std::string& reason) {
  const std::string dir = MakeScratchDir("early-exit");
  CommandResult r = RunShell(
      absl::StrCat(TROIKARUN_BINARY, " -np 3 -- sh -c 'if [ \"$TROIKA_RANK\" = 1 ]; then exit ",
                   code, "; fi; exec ", SCENARIO_RANK_BINARY, " join-before-wait'"),
      dir, absl::Seconds(120));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.exit_code, -1) << "troikarun hung";
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_THAT(all, HasSubstr(reason)) << all;
}

TEST(ScenarioProcessTest, RankExitingZeroBeforeInitFailsTheOthersNamingIt) {
  const std::string dir = MakeScratchDir("early-exit");
  ExpectEarlyExitEndsTheJob(0, "rank 1 on ");
  ExpectEarlyExitEndsTheJob(0, "exited with code 0 before joining the job");
}

TEST(ScenarioProcessTest, RankExitingNonZeroBeforeInitEndsTroikarunPromptly) {
  ExpectEarlyExitEndsTheJob(3, "exited with code 3");
}

}  // namespace
}  // namespace troika::testing
