// Elastic jobs (docs/elastic.md) as users run them: troikarun --min-np, two troika-agent
// processes of two ranks each, ranks training through troika::elastic::Run
// (troika-example-elastic). A rank killed with SIGKILL mid-training: the others learn it
// within 5 s, go on as 3 ranks from their last commit, finish, and end with bit-identical
// weights; a whole agent killed: the other node goes on alone; three losses in a row: three
// generations. Below the minimum the job aborts saying so. A troika-agent started for a running
// job below its --max-np is admitted at the next commit: the job grows, the new ranks start
// from rank 0's state and all end identical; ten such joins and losses in turn leave the
// coordinator, the agent and the rank that stay with no more threads, descriptors or memory.
// (Jobs without --min-np keep failing fast: fault_test.)

#include <dirent.h>
#include <signal.h>

#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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
  // The timeline went on across the change, which it marks, until the job ended.
  const std::string trace = ReadFile(dir_ + "/trace.json");
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"membership change\",\"cat\":\"elastic\""));
  EXPECT_THAT(trace, HasSubstr("the job goes on with 3 ranks as generation 2\",\"size\":3}"));
  EXPECT_TRUE(absl::EndsWith(trace, "]}\n"))
      << trace.substr(std::max<size_t>(trace.size(), 200) - 200);
  EXPECT_GT(trace.rfind("\"name\":\"collective\""), trace.find("membership change"))
      << "the next generation's phases are on it";
}

// A second loss while the survivors of the first attach their next generation (the rank that
// would be rank 2 of generation 2 exits as it restores its commit, before it attaches; or
// once attached, as it syncs): that generation ends too, and the ranks still attaching follow
// the second change to generation 3 (their agent answers them with the renumbering).
TEST_F(ElasticTest, ALossWhileTheSurvivorsAttachEndsTheNextGenerationToo) {
  for (const char* where : {"restore", "sync"}) {
    SCOPED_TRACE(where);
    dir_ = MakeScratchDir("elastic-second-loss");
    Start(4, 2, 400, absl::StrCat("--fail_at=3:", where));
    const pid_t victim = WaitForPid(2);
    ASSERT_NE(victim, 0) << Err();
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
    EXPECT_THAT(Out(), HasSubstr(absl::StrCat("[3] failing at ", where)));
    EXPECT_THAT(Err(), HasSubstr("the job goes on with 3 ranks as generation 2"));
    EXPECT_THAT(Err(), HasSubstr("exited with code 1; the job goes on with 2 ranks as "
                                 "generation 3"));
    ExpectFinishedIdentical({0, 1}, 400, 2, 3);
  }
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
  ExpectFinishedIdentical({1, 3, 4}, 600, 3, 4);
  for (const char* change : {"the job goes on with 5 ranks as generation 2",
                             "the job goes on with 4 ranks as generation 3",
                             "the job goes on with 3 ranks as generation 4"}) {
    EXPECT_THAT(Err(), HasSubstr(change));
  }
}

TEST_F(ElasticTest, AnAgentStartedForTheRunningJobIsAdmittedAtACommitAndItsRanksCatchUp) {
  const std::string address = StartCoordinator();
  const std::string env = "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=grow-secret ";
  const std::string example =
      absl::StrCat(EXAMPLE_ELASTIC_BINARY, " --steps=300 --commit_every=", kCommitEvery);
  StartGrowable(address, env, "grow", example);
  ASSERT_TRUE(WaitForOutput("[0] step 20 size 2")) << Out() << Err();
  const pid_t agent = StartJoiner(address, env, "grow", example);
  EXPECT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
  EXPECT_EQ(WaitWithTimeout(agent, absl::Seconds(30)), 0) << ReadFile(dir_ + "/agent.err");
  const std::string all = Out() + ReadFile(dir_ + "/agent.out");

  // The job grew at one commit: every rank went on from it, none went back.
  std::regex synced(R"(\[(\d)\] synced to step (\d+))");
  std::map<int, std::vector<int>> syncs;  // rank -> steps it synced to, in order
  for (std::sregex_iterator it(all.begin(), all.end(), synced), end; it != end; ++it) {
    syncs[std::stoi((*it)[1])].push_back(std::stoi((*it)[2]));
  }
  ASSERT_EQ(syncs.size(), 4u) << all;
  const int grown_at = syncs[2].at(0);  // the new ranks' first state: rank 0's
  EXPECT_GT(grown_at, 20);
  EXPECT_EQ(grown_at % kCommitEvery, 0) << "at a commit";
  EXPECT_THAT(syncs[0], ::testing::ElementsAre(0, grown_at));
  EXPECT_THAT(syncs[1], ::testing::ElementsAre(0, grown_at));
  EXPECT_THAT(syncs[3], ::testing::ElementsAre(grown_at));
  EXPECT_EQ(all.find("restored to"), std::string::npos) << all;
  // All four finish as generation 2 with the same weights.
  ExpectFinishedIdentical({0, 1, 2, 3}, 300, 4, 2, all);
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"),
              HasSubstr("2 ranks on node-c joined at a commit; the job goes on with 4 ranks as "
                        "generation 2"));
}

// A node admitted at a commit whose agent never attaches (here its command cannot start, so
// it exits at once; as if it died right after its admission): once the survivors' attach of
// the grown generation times out, that generation ends without the node's ranks, the
// survivors' agents are answered with the renumbering, their ranks (waiting in the agent's
// gate) follow it, and the job goes on as it was.
TEST_F(ElasticTest, AnAdmittedNodeThatNeverAttachesIsLeftOutAndTheJobGoesOn) {
  const std::string address = StartCoordinator();
  const std::string env = "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=gone-secret ";
  StartGrowable(address, env, "gone",
                absl::StrCat(EXAMPLE_ELASTIC_BINARY, " --steps=300 --commit_every=", kCommitEvery),
                "--attach_timeout=3s");
  ASSERT_TRUE(WaitForOutput("[0] step 20 size 2")) << Out() << Err();
  const pid_t agent = StartJoiner(address, env, "gone", dir_ + "/no-such-command");
  EXPECT_EQ(WaitWithTimeout(agent, absl::Seconds(60)), 127) << ReadFile(dir_ + "/agent.err");
  EXPECT_THAT(ReadFile(dir_ + "/agent.err"), HasSubstr("admitted to job 'gone' at a commit"));
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
  EXPECT_THAT(ReadFile(dir_ + "/coordinator.err"),
              HasSubstr("ranks 2-3 did not attach within 3s; the job goes on with 2 ranks as "
                        "generation 3"));
  EXPECT_THAT(Err(), HasSubstr("job 'gone' goes on as generation 3 of 2 ranks"));
  // Both ranks went from the commit that admitted the node to generation 3 and finished.
  ExpectFinishedIdentical({0, 1}, 300, 2, 3);
}

// The same, and one of the survivors killed while they wait for the node: the exit its agent
// had queued for the generation that ended is reported in the next one, which ends too, and
// the last rank finishes alone.
TEST_F(ElasticTest, ARankLostWhileTheOthersWaitForANodeThatNeverAttachesIsLostToo) {
  const std::string address = StartCoordinator();
  const std::string env = "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=twice-secret ";
  troikarun_ = StartShell(absl::StrCat(
      env, "exec ", TROIKARUN_BINARY, " --coordinator=", address,
      " --job=twice -np 2 --min-np 1 --max-np 4 --attach_timeout=3s -- ", EXAMPLE_ELASTIC_BINARY,
      " --pid_dir=", dir_, " --steps=300 --commit_every=", kCommitEvery, " >", dir_, "/stdout 2>",
      dir_, "/stderr"));
  ASSERT_TRUE(WaitForOutput("[0] step 20 size 2")) << Out() << Err();
  const pid_t rank1 = WaitForPid(1);
  ASSERT_NE(rank1, 0) << Err();
  const pid_t agent = StartShell(absl::StrCat(
      env, "exec ", AGENT_BINARY, " --coordinator=", address,
      " --job=twice --nnodes=1 --nproc-per-node=2 --min_np=1 --host=node-c --socket_dir=", dir_,
      " -- ", dir_, "/no-such-command 2>", dir_, "/agent.err"));
  others_.push_back(agent);
  ASSERT_EQ(WaitWithTimeout(agent, absl::Seconds(60)), 127) << ReadFile(dir_ + "/agent.err");
  ASSERT_EQ(kill(rank1, SIGKILL), 0);  // within the 3 s the others wait for the node
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
  const std::string log = ReadFile(dir_ + "/coordinator.err");
  EXPECT_THAT(log, HasSubstr("ranks 2-3 did not attach within 3s; the job goes on with 2 ranks "
                             "as generation 3"));
  EXPECT_THAT(log, HasSubstr("killed by signal 9 (Killed); the job goes on with 1 rank as "
                             "generation 4"));
  ExpectFinishedIdentical({0}, 300, 1, 4);
}

// What a process holds: threads, open descriptors, resident memory.
// What a process holds. `threads` counts its threads but those of gRPC's pools (named
// default-executor and event_engine), which gRPC grows and shrinks with the load within
// bounds of its own: a coordinator read 11 threads in all in round 1 and 14 in each round
// after, in one run of 25. A leaked channel, server or completion queue shows in `fds`.
struct Holdings {
  int threads = 0, fds = 0;
  int64_t rss_kib = 0;
};

Holdings HoldingsOf(pid_t pid) {
  static const std::set<std::string> kGrpcPools = {"default-executo", "event_engine"};
  Holdings h;
  if (DIR* dir = opendir(absl::StrCat("/proc/", pid, "/task").c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string comm =
          ReadFile(absl::StrCat("/proc/", pid, "/task/", entry->d_name, "/comm"));
      h.threads += !kGrpcPools.count(std::string(absl::StripAsciiWhitespace(comm)));
    }
    closedir(dir);
  }
  const std::string status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
  std::smatch m;
  if (std::regex_search(status, m, std::regex(R"(VmRSS:\s+(\d+))"))) h.rss_kib = std::stoll(m[1]);
  if (DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str())) {
    while (dirent* entry = readdir(dir)) h.fds += entry->d_name[0] != '.';
    closedir(dir);
  }
  return h;
}

// The one child process of `parent` (an agent's rank); 0 if there is none yet.
pid_t ChildOf(pid_t parent) {
  pid_t child = 0;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      int pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
      const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
      const size_t paren = stat.rfind(')');
      int ppid = 0;
      if (paren != std::string::npos &&
          std::sscanf(stat.c_str() + paren + 1, " %*c %d", &ppid) == 1 && ppid == parent) {
        child = pid;
      }
    }
    closedir(proc);
  }
  return child;
}

TEST_F(ElasticTest, TenJoinsAndLossesInTurnLeakNothing) {
  const std::string address = StartCoordinator();
  const pid_t coordinator = others_.back();
  const std::string env = "TROIKA_PLAINTEXT=1 TROIKA_JOB_TOKEN=turns-secret ";
  // 2 ranks on 2 agents; each round an agent of 1 rank joins (3 ranks), then its rank is
  // killed (2 again): generations 2 to 11. Training lasts until generation 11.
  const std::string example = absl::StrCat(EXAMPLE_ELASTIC_BINARY,
                                           " --steps=200 --step_ms=5 --commit_every=5 "
                                           "--min_generation=11 --pid_dir=",
                                           dir_);
  troikarun_ =
      StartShell(absl::StrCat(env, "exec ", TROIKARUN_BINARY, " --coordinator=", address,
                              " --job=turns -np 2 --nproc-per-node 1 --min-np 1 --max-np 3 -- ",
                              example, " >", dir_, "/stdout 2>", dir_, "/stderr"));
  const pid_t rank0 = WaitForPid(0);
  ASSERT_NE(rank0, 0) << Err();
  const pid_t agent0 = ParentOf(rank0);
  std::vector<Holdings> coordinator_holds, agent_holds, rank_holds;
  int generation = 1;
  for (int round = 1; round <= 5; ++round) {
    const std::string name = absl::StrCat("join-", round);
    const pid_t agent = StartShell(
        absl::StrCat(env, "exec ", AGENT_BINARY, " --coordinator=", address,
                     " --job=turns --nnodes=1 --nproc-per-node=1 --min_np=1 --host=", name,
                     " --data_host=127.0.0.1 --socket_dir=", dir_, " -- ", example, " >", dir_, "/",
                     name, ".out 2>", dir_, "/", name, ".err"));
    others_.push_back(agent);
    ASSERT_TRUE(WaitForOutput(absl::StrCat("[0] generation ", ++generation, " first step")))
        << "round " << round << ": no join\n"
        << Out() << Err() << ReadFile(dir_ + "/" + name + ".err");
    const pid_t rank = ChildOf(agent);
    ASSERT_GT(rank, 0);
    ASSERT_EQ(kill(rank, SIGKILL), 0);
    ASSERT_TRUE(WaitForOutput(absl::StrCat("[0] generation ", ++generation, " first step")))
        << "round " << round << ": no loss\n"
        << Out() << Err();
    EXPECT_EQ(WaitWithTimeout(agent, absl::Seconds(30)), 0) << "the job went on without its rank\n"
                                                            << ReadFile(dir_ + "/" + name + ".err");
    coordinator_holds.push_back(HoldingsOf(coordinator));
    agent_holds.push_back(HoldingsOf(agent0));
    rank_holds.push_back(HoldingsOf(rank0));
    for (const auto* h : {&coordinator_holds.back(), &agent_holds.back(), &rank_holds.back()}) {
      std::printf("round %d generation %d: %d threads, %d descriptors, %lld KiB\n", round,
                  generation, h->threads, h->fds, static_cast<long long>(h->rss_kib));
    }
  }
  ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
  ExpectFinishedIdentical({0, 1}, -1, 2, 11);
  // From the first round to the last (4 rounds, 8 generations): nothing grows with them.
  const std::vector<std::pair<std::string, std::vector<Holdings>*>> holders = {
      {"coordinator", &coordinator_holds}, {"agent", &agent_holds}, {"rank 0", &rank_holds}};
  for (const auto& [who, holds] : holders) {
    const Holdings& first = holds->front();
    const Holdings& last = holds->back();
    EXPECT_LE(last.threads, first.threads + 2) << who << " threads (but gRPC's pools)";
    EXPECT_LE(last.fds, first.fds + 2) << who << " descriptors";
    EXPECT_LE(last.rss_kib, first.rss_kib + 4096) << who << " resident KiB";
  }
}

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

// A coordinator restarted while the ranks run a steady-state schedule (generation 1, commits
// every 300 steps): the ranks go on with the old coordinator's schedule, the new one publishes
// its own, and each commit (a barrier outside the schedule) ends it and is negotiated. The new
// coordinator numbers its schedules above the old one's (the agents tell it the highest they
// were sent): with the same number, what the ranks said of the old schedule ended the new one
// in the agents but not in the coordinator, which went on dropping their requests (a hang).
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

// --max-restarts: the agent starts a killed rank again; it rejoins at the next commit, as the
// job's last rank, from rank 0's state. With 2 ranks per agent the node's session carries the
// change that admits it; with 1, the node has no rank left and attaches it as a new node.
TEST_F(ElasticTest, AnAgentStartsAKilledRankAgainAndItRejoinsAtACommit) {
  for (int per_node : {2, 1}) {
    SCOPED_TRACE(absl::StrCat(per_node, " ranks per agent"));
    dir_ = MakeScratchDir("elastic-restart");
    troikarun_ = StartShell(absl::StrCat(
        "exec ", TROIKARUN_BINARY, " -np 4 --nproc-per-node ", per_node,
        " --min-np 2 --max-restarts 1 -- ", EXAMPLE_ELASTIC_BINARY, " --pid_dir=", dir_,
        " --steps=400 --commit_every=", kCommitEvery, " >", dir_, "/stdout 2>", dir_, "/stderr"));
    const pid_t victim = WaitForPid(2);
    ASSERT_NE(victim, 0) << Err();
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    ASSERT_EQ(WaitWithTimeout(troikarun_, absl::Seconds(90)), 0) << Out() << Err();
    // Lost (generation 2: 3 ranks), then back as rank 3 (generation 3: 4 ranks).
    ExpectFinishedIdentical({0, 1, 2, 3}, 400, 4, 3);
    EXPECT_THAT(Err(), HasSubstr("the job goes on with 3 ranks as generation 2"));
    EXPECT_THAT(Err(), HasSubstr("rank 2 of this node starts again as rank 3 of 4"));
    std::smatch synced;
    const std::string out = Out();
    EXPECT_TRUE(std::regex_search(out, synced, std::regex(R"(\[2\] synced to step [1-9]\d*)")))
        << "the new process took rank 0's state\n"
        << out;
  }
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
