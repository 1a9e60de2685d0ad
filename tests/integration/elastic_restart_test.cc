// Elastic jobs (docs/elastic.md) across a coordinator restart (troika-coordinator
// --state_dir, docs/protocol.md "Coordinator restart"): the generation in force resumes; a
// node that does not come back is left out; schedules end at each commit; a node waiting to
// join, and a rank started again waiting to rejoin, are admitted by the restarted coordinator.

#include <signal.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/elastic_fixture.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(ElasticTest, ARestartedCoordinatorResumesTheGenerationInForce) {
  const std::string state = "--state_dir=" + dir_ + "/state";
  const std::string address = StartCoordinator(state);
  troikarun_ = StartShell(absl::StrCat(
      "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=restart-secret exec ", TROIKARUN_BINARY,
      " --coordinator=", address, " --job=restart -np 4 --nproc-per-node 2 --min-np 2 -- ",
      EXAMPLE_ELASTIC_BINARY, " --pid_dir=", dir_, " --steps=600 --commit_every=", kCommitEvery,
      " >", dir_, "/stdout 2>", dir_, "/stderr"));
  const pid_t victim = WaitForPid(2);
  ASSERT_NE(victim, 0) << Err();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitForOutput("[0] generation 2 first step")) << Out() << Err();
  // The coordinator dies in generation 2 and comes back on the same port with its state.
  RestartCoordinator(others_.back(), address, state);
  if (HasFatalFailure()) return;
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0)
      << Out() << Err() << ReadFile(dir_ + "/coordinator.err");
  ExpectFinishedIdentical({0, 1, 3}, 600, 3);
  EXPECT_THAT(Err(), HasSubstr("reconnected to the coordinator; resuming job 'restart'"));
}

// The coordinator dies, and so does one node's agent while it is down: the other node takes
// the job back from the restarted coordinator, the restored generation ends without the node
// that did not come back at the attach timeout, and the node that did goes on alone as the
// next generation (its ranks, with their sessions, learn it from their agent).
TEST_F(ElasticTest, ANodeThatDoesNotComeBackAfterACoordinatorRestartIsLeftOut) {
  const std::string state = "--state_dir=" + dir_ + "/state";
  const std::string address = StartCoordinator(state);
  const pid_t coordinator = others_.back();
  pid_t agents[2];
  for (int node : {0, 1}) {
    agents[node] = StartShell(absl::StrCat(
        "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=back-secret exec ", AGENT_BINARY,
        " --coordinator=", address, " --job=back --nnodes=2 --nproc-per-node=2 --node_rank=", node,
        " --min_np=2 --host=node-", node, " --data_host=127.0.0.1 --socket_dir=", dir_,
        " --reconnect_timeout=5s -- ", EXAMPLE_ELASTIC_BINARY, " --pid_dir=", dir_,
        " --steps=600 --commit_every=", kCommitEvery, " >", dir_, "/node", node, ".out 2>", dir_,
        "/node", node, ".err"));
    others_.push_back(agents[node]);
  }
  const std::string out0 = dir_ + "/node0.out", err0 = dir_ + "/node0.err";
  ASSERT_NE(WaitForPid(3), 0) << ReadFile(err0);
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  WaitWithTimeout(coordinator, absl::Seconds(10));
  // Every rank is held at its next commit (negotiated) by then; node 1 goes for good.
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_EQ(kill(agents[1], SIGKILL), 0);
  WaitWithTimeout(agents[1], absl::Seconds(10));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  ASSERT_EQ(StartCoordinator(state, port), address);
  ASSERT_EQ(WaitWithTimeout(agents[0], absl::Seconds(90)), 0)
      << ReadFile(out0) << ReadFile(err0) << ReadFile(dir_ + "/coordinator.err");
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"), HasSubstr("did not attach within"));
  EXPECT_THAT(ReadFile(err0), HasSubstr("job 'back' goes on as generation 2 of 2 ranks"));
  ExpectFinishedIdentical({0, 1}, 600, 2, 2, ReadFile(out0));
}

// A coordinator restarted while the ranks run a steady-state schedule (generation 1, commits
// every 300 steps): the ranks go on with the old coordinator's schedule, the new one publishes
// its own, and each commit (a barrier outside the schedule) ends it and is negotiated. The new
// coordinator numbers its schedules above the old one's (the agents tell it the highest they
// were sent): with the same number, what the ranks said of the old schedule ended the new one
// in the agents but not in the coordinator, which went on dropping their requests (a hang).
TEST_F(ElasticTest, ARestartedCoordinatorsSchedulesEndAtEachCommit) {
  const std::string state = "--state_dir=" + dir_ + "/state";
  const std::string address = StartCoordinator(state);
  StartGrowable(address, "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=commits-secret ", "commits",
                absl::StrCat(EXAMPLE_ELASTIC_BINARY, " --steps=900 --commit_every=300"));
  ASSERT_TRUE(WaitForOutput("[0] step 20 size 2")) << Out() << Err();
  RestartCoordinator(others_.back(), address, state);
  if (HasFatalFailure()) return;
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(60)), 0)
      << Out() << Err() << ReadFile(dir_ + "/coordinator.err");
  ExpectFinishedIdentical({0, 1}, 900, 2, 1);
  const std::string log = ReadFile(dir_ + "/coordinator.err");
  EXPECT_THAT(log, HasSubstr("resumed after a coordinator restart"));
  EXPECT_THAT(log, ::testing::ContainsRegex("schedule [2-9][0-9]* of .* runs without negotiation"))
      << "the new coordinator's first schedule is numbered above the old one's";
}

// A node waiting to join loses its RegisterNode call when the coordinator dies; it waits for the
// coordinator to come back (restarted with its --state_dir), registers again and is admitted at
// the next commit.
TEST_F(ElasticTest, ANodeWaitingToJoinOutlivesACoordinatorRestart) {
  const std::string state = "--state_dir=" + dir_ + "/state";
  const std::string address = StartCoordinator(state);
  const std::string env = "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=wait-secret ";
  // Commits at steps 300, 600 and 900 only: the node waits from about step 20 to step 300.
  const std::string example =
      absl::StrCat(EXAMPLE_ELASTIC_BINARY, " --steps=900 --commit_every=300");
  StartGrowable(address, env, "wait", example);
  ASSERT_TRUE(WaitForOutput("[0] step 20 size 2")) << Out() << Err();
  const pid_t agent = StartJoiner(address, env, "wait", example);
  ASSERT_TRUE(WaitForCoordinatorLog("2 ranks on node-c wait to join at the next commit"))
      << ReadFile(dir_ + "/coordinator.err");
  ASSERT_EQ(Out().find("[0] step 300 "), std::string::npos) << "the commit came first";
  RestartCoordinator(others_[0], address, state);
  if (HasFatalFailure()) return;
  EXPECT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0)
      << Out() << Err() << ReadFile(dir_ + "/coordinator.err");
  EXPECT_EQ(WaitWithTimeout(agent, absl::Seconds(30)), 0) << ReadFile(dir_ + "/agent.err");
  EXPECT_THAT(ReadFile(dir_ + "/agent.err"), HasSubstr("; registering again"));
  const std::string all = Out() + ReadFile(dir_ + "/agent.out");
  ExpectFinishedIdentical({0, 1, 2, 3}, 900, 4, 2, all);
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"),
              HasSubstr("2 ranks on node-c joined at a commit; the job goes on with 4 ranks as "
                        "generation 2"));
}

// A rank started again (--max-restarts) waits to rejoin at the next commit when the coordinator
// dies: its agent registers it again with the restarted coordinator, which admits it.
TEST_F(ElasticTest, ARankStartedAgainRejoinsAcrossACoordinatorRestart) {
  const std::string state = "--state_dir=" + dir_ + "/state";
  const std::string address = StartCoordinator(state);
  // Commits at steps 300, 600 and 900 only: the rank waits from its loss to step 300.
  troikarun_ = StartShell(
      absl::StrCat("TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=again-secret exec ", TROIKARUN_BINARY,
                   " --coordinator=", address, " --job=again -np 4 --nproc-per-node 2 --min-np 2 ",
                   "--max-restarts 1 -- ", EXAMPLE_ELASTIC_BINARY, " --pid_dir=", dir_,
                   " --steps=900 --commit_every=300 >", dir_, "/stdout 2>", dir_, "/stderr"));
  const pid_t victim = WaitForPid(2);
  ASSERT_NE(victim, 0) << Err();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitForCoordinatorLog("wait to join at the next commit"))
      << ReadFile(dir_ + "/coordinator.err") << Err();
  ASSERT_EQ(Out().find(" step 300 "), std::string::npos) << "the commit came first";
  RestartCoordinator(others_.back(), address, state);
  if (HasFatalFailure()) return;
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0)
      << Out() << Err() << ReadFile(dir_ + "/coordinator.err");
  // Lost (generation 2: 3 ranks), then back as rank 3 (generation 3: 4 ranks).
  ExpectFinishedIdentical({0, 1, 2, 3}, 900, 4, 3);
  EXPECT_THAT(Err(), HasSubstr("of this node: registering with job 'again': "));
  EXPECT_THAT(Err(), HasSubstr("rank 2 of this node starts again as rank 3 of 4"));
}

}  // namespace
}  // namespace troika::testing
