// The scenarios of tests/integration/scenarios.h with ranks wired straight to an in-process
// coordinator (scenario_process_test.cc runs them behind agents).

#include "gtest/gtest.h"
#include "tests/integration/scenarios.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

void RunOnEveryRank(const std::string& scenario, int size) {
  TestCluster cluster;
  auto contexts = cluster.Join("scenario-" + scenario, size);
  OnEveryRank(size, [&](int rank) {
    if (!contexts[rank]) return;
    absl::Status s = scenarios::RunScenario(scenario, *contexts[rank]);
    EXPECT_TRUE(s.ok()) << "rank " << rank << ": " << s;
  });
}

TEST(ScenarioTest, JoinBeforeWaitingRunsTheRanksEarlierOperations) {
  RunOnEveryRank("join-before-wait", 2);
  RunOnEveryRank("join-before-wait", 3);
}

TEST(ScenarioTest, AlltoallInASetSmallerThanTheJob) { RunOnEveryRank("set-alltoall", 3); }

TEST(ScenarioTest, SameNamesAndBarriersInFlightInTwoSets) { RunOnEveryRank("set-same-name", 3); }

}  // namespace
}  // namespace troika::testing
