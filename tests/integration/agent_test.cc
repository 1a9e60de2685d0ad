// troika-agent as real processes against an in-process coordinator (and, for liveness, a
// coordinator process): two agents of two ranks train the weights of one rank; an abort on one
// node stops the other with the cause's exit code; a vanished coordinator stops the ranks.

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/http_get.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class AgentProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir("agent");
    coordinator::CoordinatorOptions options;
    options.listen_address = "127.0.0.1:0";
    options.tls.plaintext = true;
    auto started = coordinator::Coordinator::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = *std::move(started);
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
  }

  void TearDown() override {
    for (pid_t pid : agents_) WaitWithTimeout(pid, absl::ZeroDuration());  // kills leftovers
  }

  // Starts the agent of node `node` ("node-a", "node-b", ...) of a job of 2 nodes x 2 ranks;
  // its output goes to dir_/agent-<node>.{out,err}.
  pid_t StartAgent(int node, const std::string& job, const std::string& command,
                   const std::string& address = "", const std::string& extra_flags = "") {
    const std::string name = absl::StrCat("agent-", node);
    pid_t pid = StartShell(absl::StrCat(
        "exec ", AGENT_BINARY,
        " --plaintext=true --coordinator=", address.empty() ? address_ : address, " --job=", job,
        " --nnodes=2 --nproc-per-node=2 --node_rank=", node, " --host=node-",
        std::string(1, static_cast<char>('a' + node)),
        " --data_host=127.0.0.1 --grace_period=2s --socket_dir=", dir_, " ", extra_flags, " -- ",
        command, " >", dir_, "/", name, ".out 2>", dir_, "/", name, ".err"));
    agents_.push_back(pid);
    return pid;
  }
  // Starts troika-coordinator with `flags` (which name the port to listen on) and waits for
  // its port; output in dir_/coordinator.{out,err} (appended).
  pid_t StartCoordinatorProcess(const std::string& flags, int* port) {
    const std::string port_file = absl::StrCat(dir_, "/port.", ++coordinators_);
    const pid_t pid =
        StartShell(absl::StrCat("exec ", COORDINATOR_BINARY, " ", flags, " --port_file=", port_file,
                                " >>", dir_, "/coordinator.out 2>>", dir_, "/coordinator.err"));
    *port = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), port) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_GT(*port, 0) << ReadFile(dir_ + "/coordinator.err");
    return pid;
  }
  std::string Out(int node) { return ReadFile(absl::StrCat(dir_, "/agent-", node, ".out")); }
  std::string Err(int node) { return ReadFile(absl::StrCat(dir_, "/agent-", node, ".err")); }

  std::string dir_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::string address_;
  void ExpectRestartLeavesTheWeightsOfAnUndisturbedRun(int signal, bool schedules = false);

  std::vector<pid_t> agents_;
  int coordinators_ = 0;
};

TEST_F(AgentProcessTest, TwoAgentsOfTwoRanksTrainTheWeightsOfOneRank) {
  constexpr int kSteps = 40;
  const std::string one_dir = MakeScratchDir("agent-one-rank");
  CommandResult one =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 1 -- ", EXAMPLE_TRAIN_BINARY,
                            " --steps ", kSteps, " --dump_weights ", one_dir, "/weights.txt"),
               one_dir, absl::Seconds(120));
  ASSERT_EQ(one.exit_code, 0) << one.err;

  const std::string train = absl::StrCat(EXAMPLE_TRAIN_BINARY, " --steps ", kSteps,
                                         " --dump_weights ", dir_, "/weights.txt");
  const pid_t a = StartAgent(0, "two-nodes", train);
  const pid_t b = StartAgent(1, "two-nodes", train);
  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(120)), 0) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(120)), 0) << Err(1);
  EXPECT_THAT(Out(0), HasSubstr(absl::StrCat("[0] step ", kSteps, " loss")));
  EXPECT_THAT(Out(1), Not(HasSubstr("step"))) << "only rank 0 reports";
  EXPECT_THAT(Err(0) + Err(1), Not(HasSubstr("troika-agent:"))) << "nothing went wrong";
  const std::vector<double> expected = ReadWeights(one_dir + "/weights.txt");
  ASSERT_FALSE(expected.empty());
  ExpectSameWeights(expected, ReadWeights(dir_ + "/weights.txt"), "2 agents x 2 ranks");
}

TEST_F(AgentProcessTest, AutotuningThroughAgentsFinishesAndSavesTheBest) {
  // Settings reach ranks through their agents and reports come back through them.
  coordinator::CoordinatorOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls.plaintext = true;
  coordinator::AutotuneOptions& autotune = options.registry.job.autotune.emplace().options;
  autotune.warmup_samples = 1;
  autotune.steps_per_sample = 3;
  autotune.max_samples = 3;
  options.registry.autotune_dir = dir_;
  auto tuned = coordinator::Coordinator::Start(options);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*tuned)->port());
  const std::string train = absl::StrCat(EXAMPLE_TRAIN_BINARY, " --steps 400");
  const pid_t a = StartAgent(0, "tuned", train, address);
  const pid_t b = StartAgent(1, "tuned", train, address);
  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(120)), 0) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(120)), 0) << Err(1);
  const std::string params = ReadFile(dir_ + "/tuned-autotune.params");
  EXPECT_THAT(params, HasSubstr("fusion_threshold_bytes=")) << "tuning did not finish";
  EXPECT_THAT(ReadFile(dir_ + "/tuned-autotune.csv"), HasSubstr("score"));
}

TEST_F(AgentProcessTest, AgentServesItsNodesMetricsAndIsReadyWhileAttached) {
  const int port = FreePort();
  const std::string train = absl::StrCat(EXAMPLE_TRAIN_BINARY, " --steps 400");
  const pid_t a =
      StartAgent(0, "watched", train, "", absl::StrCat("--metrics_listen=127.0.0.1:", port));
  const pid_t b = StartAgent(1, "watched", train);
  // Scrape while the job runs until it shows: ready, both ranks running with their sessions
  // open (a rank opens its session a little after attaching), requests relayed.
  std::string text;
  int ready = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);  // a not-hung bound
  while (absl::Now() < deadline) {
    absl::StatusOr<HttpResponse> r = HttpGet(port, "/readyz");
    ready = r.ok() ? r->status : 0;
    absl::StatusOr<HttpResponse> m = HttpGet(port, "/metrics");
    if (m.ok()) text = m->body;
    if (ready == 200 &&
        absl::StrContains(text, "troika_agent_ranks_running{troika_job=\"watched\"} 2\n") &&
        absl::StrContains(text, "troika_streams_connected{method=\"Session\"} 2\n") &&
        absl::StrContains(text, "troika_agent_requests_forwarded_total{troika_job=\"watched\"} ") &&
        !absl::StrContains(text,
                           "troika_agent_requests_forwarded_total{troika_job=\"watched\"} 0\n")) {
      break;
    }
    usleep(50 * 1000);
  }
  EXPECT_EQ(ready, 200);
  EXPECT_THAT(text, HasSubstr("troika_agent_ranks_running{troika_job=\"watched\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("troika_agent_upstream_connected{troika_job=\"watched\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("troika_streams_connected{method=\"Session\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("process_resident_memory_bytes"));
  EXPECT_THAT(text,
              Not(HasSubstr("troika_agent_requests_received_total{troika_job=\"watched\"} 0\n")));
  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(120)), 0) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(120)), 0) << Err(1);
}

TEST_F(AgentProcessTest, RanksGetTheAgentsEnvironmentAndItsSocketIsRemovedAtExit) {
  const std::string script =
      "'echo $TROIKA_RANK $TROIKA_SIZE $TROIKA_LOCAL_RANK $TROIKA_LOCAL_SIZE $TROIKA_DEVICE "
      "$TROIKA_JOB $TROIKA_HOST $TROIKA_DATA_HOST $TROIKA_COORDINATOR'";
  const pid_t a = StartAgent(0, "env", "/bin/sh -c " + script);
  const pid_t b = StartAgent(1, "env", "/bin/sh -c " + script);
  ASSERT_EQ(WaitWithTimeout(a, absl::Seconds(30)), 0) << Err(0);
  ASSERT_EQ(WaitWithTimeout(b, absl::Seconds(30)), 0) << Err(1);
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    const std::regex line(absl::StrCat("\\[", rank, "\\] ", rank, " 4 ", rank % 2, " 2 ", rank % 2,
                                       " env node-", std::string(1, 'a' + node),
                                       " 127\\.0\\.0\\.1 unix:(\\S+)\n"));
    std::smatch match;
    const std::string out = Out(node);
    ASSERT_TRUE(std::regex_search(out, match, line)) << out;
    EXPECT_THAT(match[1].str(), ::testing::StartsWith(dir_ + "/troika-agent-"));
    EXPECT_NE(access(match[1].str().c_str(), F_OK), 0) << match[1] << " was not removed";
  }
}

// Two nodes of two ranks: each rank also gets what horovodrun --gloo sets, the node (its
// agent) being the host: local rank and size within it, its index among the nodes and their
// number, and its --host.
TEST_F(AgentProcessTest, RanksGetHorovodsEnvironmentWithTheirNodesIndexAsCrossRank) {
  const std::string script =
      "'echo env $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_RANK $HOROVOD_LOCAL_SIZE "
      "$HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $HOROVOD_HOSTNAME'";
  // Started in the other order: the cross rank is the node rank, not the order of arrival.
  const pid_t b = StartAgent(1, "horovod-env", "/bin/sh -c " + script);
  const pid_t a = StartAgent(0, "horovod-env", "/bin/sh -c " + script);
  ASSERT_EQ(WaitWithTimeout(a, absl::Seconds(30)), 0) << Err(0);
  ASSERT_EQ(WaitWithTimeout(b, absl::Seconds(30)), 0) << Err(1);
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    EXPECT_THAT(Out(node),
                HasSubstr(absl::StrCat("[", rank, "] env ", rank, " 4 ", rank % 2, " 2 ", node,
                                       " 2 node-", std::string(1, 'a' + node), "\n")));
  }
}

TEST_F(AgentProcessTest, RankFailingOnOneNodeAbortsTheOtherWithTheSameExitCode) {
  // Rank 3 fails once every rank runs (has written its pid).
  const std::string script = absl::StrCat(
      "/bin/sh -c 'echo $$ > ", dir_, "/pid.$TROIKA_RANK; if [ $TROIKA_RANK = 3 ]; then ",
      "for r in 0 1 2 3; do while [ ! -s ", dir_, "/pid.$r ]; do sleep 0.05; done; done; exit 5; ",
      "fi; exec sleep 600'");
  const absl::Time start = absl::Now();
  const pid_t a = StartAgent(0, "abort", script);
  const pid_t b = StartAgent(1, "abort", script);
  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(90)), 5) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(90)), 5) << Err(1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(90)) << "the other ranks were not stopped";
  EXPECT_THAT(Err(1), HasSubstr("troika-agent: rank 3 exited with code 5; stopping the other 1"));
  for (int node : {0, 1}) {
    EXPECT_THAT(Err(node), HasSubstr("troika-agent: job aborted: rank 3 on node-b exited with "
                                     "code 5\n"));
  }
  std::vector<pid_t> pids = ReadRankPids(dir_, 4);
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST_F(AgentProcessTest, SecondAgentForARunningNodeIsRefusedSayingSoNotThatItLostTheCoordinator) {
  const std::string train = absl::StrCat(EXAMPLE_TRAIN_BINARY, " --steps 1000000");
  StartAgent(0, "dup", train);
  StartAgent(1, "dup", train);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Out(0).find("step") == std::string::npos && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_THAT(Out(0), HasSubstr("step")) << Err(0);
  // The same node launched twice.
  const std::string second_dir = MakeScratchDir("second-agent");
  CommandResult second =
      RunShell(absl::StrCat("exec ", AGENT_BINARY, " --plaintext=true --coordinator=", address_,
                            " --job=dup --nnodes=2 --nproc-per-node=2 --node_rank=0 --host=node-a",
                            " --data_host=127.0.0.1 --grace_period=2s --socket_dir=", second_dir,
                            " -- ", train),
               second_dir, absl::Seconds(30));
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_THAT(second.err, HasSubstr("the coordinator ended the session: rank 0 already has a "
                                    "session"));
  EXPECT_THAT(second.err, Not(HasSubstr("lost the coordinator")));
}

TEST_F(AgentProcessTest, UnreachableCoordinatorFailsRegistrationWithAMessage) {
  CommandResult r =
      RunShell(absl::StrCat("exec ", AGENT_BINARY,
                            " --plaintext=true --coordinator=127.0.0.1:1 --job=j --nnodes=1 "
                            "--nproc-per-node=1 --attach_timeout=1s -- true"),
               dir_, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("troika-agent: registering with job 'j': cannot reach the "
                               "coordinator at 127.0.0.1:1"));
}

// A bad --coordinator fails the agent promptly, naming the address and the cause: a malformed
// one (usage error, 2), a missing socket or a name that does not resolve at once; a port where
// nothing listens after --connect_timeout (10 s) — never after --attach_timeout (60 s).
TEST_F(AgentProcessTest, BadCoordinatorAddressFailsAtOnceNamingItAndTheCause) {
  auto run = [&](const std::string& coordinator) {
    return RunShell(absl::StrCat("exec ", AGENT_BINARY, " --plaintext=true --coordinator=",
                                 coordinator, " --job=j --nnodes=1 --nproc-per-node=1 -- true"),
                    dir_, absl::Seconds(90));
  };
  CommandResult malformed = run("no-port-here");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_LT(malformed.elapsed, absl::Seconds(5));
  EXPECT_THAT(malformed.err, HasSubstr("--coordinator: coordinator address 'no-port-here' is "
                                       "invalid: no port"));
  CommandResult out_of_range = run("localhost:99999");
  EXPECT_EQ(out_of_range.exit_code, 2);
  EXPECT_THAT(out_of_range.err, HasSubstr("port 99999 is out of range (1-65535)"));

  CommandResult missing = run("unix:/nonexistent/troika.sock");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_LT(missing.elapsed, absl::Seconds(5));
  EXPECT_THAT(missing.err, HasSubstr("troika-agent: registering with job 'j': cannot reach the "
                                     "coordinator at unix:/nonexistent/troika.sock: no socket at "
                                     "/nonexistent/troika.sock"));

  CommandResult unresolvable = run("troika-no-such-host.invalid:7070");  // RFC 6761
  EXPECT_EQ(unresolvable.exit_code, 1);
  EXPECT_LT(unresolvable.elapsed, absl::Seconds(15));
  EXPECT_THAT(unresolvable.err,
              HasSubstr("cannot reach the coordinator at troika-no-such-host.invalid:7070: cannot "
                        "resolve host 'troika-no-such-host.invalid'"));

  CommandResult refused = run("127.0.0.1:1");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_LT(refused.elapsed, absl::Seconds(15));
  EXPECT_THAT(refused.err, HasSubstr("troika-agent: registering with job 'j': cannot reach the "
                                     "coordinator at 127.0.0.1:1 within 10s: nothing accepts "
                                     "connections there (connection refused)"));
}

// Runs a job of 2 agents x 2 ranks twice on a coordinator with a state directory: once
// undisturbed, once with the coordinator stopped by `signal` at step 20 and started again on
// the same address. Expects the second run to complete with the weights of the first.
void AgentProcessTest::ExpectRestartLeavesTheWeightsOfAnUndisturbedRun(int signal, bool schedules) {
  // Without fusion every tensor is allreduced on its own, so two runs give the same weights
  // bit for bit whatever their timing: any lost, repeated or reordered op would show.
  const std::string flags =
      absl::StrCat("--plaintext --fusion_threshold_bytes=0 --state_dir=", dir_,
                   "/state --log_level=info --schedules=", schedules ? "true" : "false");
  int port = 0;
  pid_t coordinator = StartCoordinatorProcess(flags + " --listen=127.0.0.1:0", &port);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  constexpr int kSteps = 300;
  auto train = [&](const std::string& weights) {
    return absl::StrCat(EXAMPLE_TRAIN_BINARY, " --steps ", kSteps, " --dump_weights ", dir_, "/",
                        weights);
  };
  pid_t a = StartAgent(0, "steady", train("steady.txt"), address);
  pid_t b = StartAgent(1, "steady", train("steady.txt"), address);
  ASSERT_EQ(WaitWithTimeout(a, absl::Seconds(120)), 0) << Err(0);
  ASSERT_EQ(WaitWithTimeout(b, absl::Seconds(120)), 0) << Err(1);

  for (int node : {0, 1}) unlink(absl::StrCat(dir_, "/agent-", node, ".out").c_str());
  a = StartAgent(0, "restarted", train("restarted.txt"), address, "--log_level=warning");
  b = StartAgent(1, "restarted", train("restarted.txt"), address, "--log_level=warning");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(Out(0), "[0] step 20 loss") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_THAT(Out(0), HasSubstr("[0] step 20 loss")) << Err(0) << Err(1);
  ASSERT_EQ(kill(coordinator, signal), 0);
  WaitWithTimeout(coordinator, absl::Seconds(10));
  ASSERT_THAT(Out(0), Not(HasSubstr(absl::StrCat("step ", kSteps, " loss"))))
      << "the run must still be going when the coordinator dies";
  coordinator = StartCoordinatorProcess(absl::StrCat(flags, " --listen=", address), &port);

  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(120)), 0) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(120)), 0) << Err(1);
  for (int node : {0, 1}) EXPECT_THAT(Err(node), HasSubstr("resumed with the coordinator"));
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"), HasSubstr("job 'restarted' restored"))
      << "the restarted coordinator knows the job from --state_dir";
  EXPECT_THAT(Out(0), HasSubstr(absl::StrCat("[0] step ", kSteps, " loss")));
  const std::vector<double> steady = ReadWeights(dir_ + "/steady.txt");
  const std::vector<double> restarted = ReadWeights(dir_ + "/restarted.txt");
  ASSERT_FALSE(steady.empty());
  EXPECT_EQ(restarted, steady) << "the weights differ from the undisturbed run's";
  kill(coordinator, SIGKILL);
  WaitWithTimeout(coordinator, absl::Seconds(10));
}

TEST_F(AgentProcessTest, CoordinatorKilledAndRestartedMidRunLeavesTheWeightsOfAnUndisturbedRun) {
  ExpectRestartLeavesTheWeightsOfAnUndisturbedRun(SIGKILL);
}

TEST_F(AgentProcessTest,
       CoordinatorKilledWhileRanksRunAScheduleLeavesTheWeightsOfAnUndisturbedRun) {
  // With --schedules the ranks run their steps on a schedule when the coordinator dies: they
  // go on without it (the data plane needs none), resume with the restarted one, and end it.
  ExpectRestartLeavesTheWeightsOfAnUndisturbedRun(SIGKILL, /*schedules=*/true);
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"),
              HasSubstr("job 'restarted': schedule 1 of 5 responses"));
}

TEST_F(AgentProcessTest, CoordinatorStoppedWithSigtermKeepsItsJobsForTheNextOne) {
  // With a state directory a stopping coordinator ends its sessions without aborting the jobs
  // (a rolling restart): the agents reconnect to the next one just the same.
  ExpectRestartLeavesTheWeightsOfAnUndisturbedRun(SIGTERM);
}

TEST_F(AgentProcessTest, FrozenCoordinatorIsNoticedWithinTheLivenessTimeoutAndStopsTheRanks) {
  // A coordinator process that can be frozen (SIGSTOP): no abort, no closed connection; only
  // unanswered keepalive pings tell the agents.
  const std::string port_file = dir_ + "/port";
  const pid_t coordinator = StartShell(absl::StrCat(
      "exec ", COORDINATOR_BINARY, " --listen=127.0.0.1:0 --plaintext --port_file=", port_file,
      " --log_level=warning >", dir_, "/coordinator.out 2>", dir_, "/coordinator.err"));
  int port = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(port, 0) << ReadFile(dir_ + "/coordinator.err");
  const std::string address = absl::StrCat("127.0.0.1:", port);
  // Training that would go on for long: rank 0's first loss shows every session is open.
  const std::string train = absl::StrCat("/bin/sh -c 'echo $$ > ", dir_, "/pid.$TROIKA_RANK; exec ",
                                         EXAMPLE_TRAIN_BINARY, " --steps 100000000'");
  // A short liveness timeout here only: a loaded machine may delay a ping's answer by more
  // than half a second, which other tests must not take for a lost coordinator.
  const std::string flags = "--liveness_timeout=1s --reconnect_timeout=1s";
  const pid_t a = StartAgent(0, "frozen", train, address, flags);
  const pid_t b = StartAgent(1, "frozen", train, address, flags);
  while (!absl::StrContains(Out(0), "[0] step 1 loss") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(Out(0), HasSubstr("[0] step 1 loss")) << Err(0) << Err(1);
  ASSERT_EQ(kill(coordinator, SIGSTOP), 0);
  const absl::Time frozen = absl::Now();
  EXPECT_EQ(WaitWithTimeout(a, absl::Seconds(30)), 1) << Err(0);
  EXPECT_EQ(WaitWithTimeout(b, absl::Seconds(30)), 1) << Err(1);
  EXPECT_LT(absl::Now() - frozen, absl::Seconds(9)) << "liveness 1s, reconnecting 1s, grace 2s";
  for (int node : {0, 1}) EXPECT_THAT(Err(node), HasSubstr("lost the coordinator"));
  for (pid_t pid : ReadRankPids(dir_, 4)) EXPECT_TRUE(ProcessGone(pid)) << pid;
  kill(coordinator, SIGKILL);
  kill(coordinator, SIGCONT);
  WaitWithTimeout(coordinator, absl::Seconds(10));
}

}  // namespace
}  // namespace troika::testing
