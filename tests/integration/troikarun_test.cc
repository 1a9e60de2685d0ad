// troikarun as a real process, with real troika-agent and rank processes (the example, or
// small sh scripts keyed on TROIKA_RANK): launch, output forwarding, failure, signals and
// usage errors.

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// "troikarun <args>", with `script` as the rank command (sh -c 'script').
std::string Troikarun(const std::string& args, const std::string& script) {
  return absl::StrCat("exec ", TROIKARUN_BINARY, " ", args, " -- /bin/sh -c '", script, "'");
}

// Shell words (for a rank's script) that wait until ranks 0 .. ranks-1 wrote their pids to
// dir/pid.<rank>: a rank that acts on the others then waits for them to run, not for a time.
std::string WaitForPidFiles(const std::string& dir, int ranks) {
  std::string words = "for r in";
  for (int r = 0; r < ranks; ++r) absl::StrAppend(&words, " ", r);
  return absl::StrCat(words, "; do while [ ! -s ", dir, "/pid.$r ]; do sleep 0.05; done; done; ");
}

// The losses rank 0 printed, in order.
std::vector<double> Losses(const std::string& out) {
  std::vector<double> losses;
  const std::regex line(R"(\[0\] step (\d+) loss ([0-9.eE+-]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    losses.push_back(std::stod((*it)[2]));
  }
  return losses;
}

TEST(TroikarunTest, ExampleOnFourRanksSucceedsAndTheLossFalls) {
  const std::string dir = MakeScratchDir("troikarun-example");
  CommandResult r = RunShell(
      absl::StrCat("exec ", TROIKARUN_BINARY, " -np 4 -- ", EXAMPLE_TRAIN_BINARY, " --steps 30"),
      dir, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> losses = Losses(r.out);
  ASSERT_EQ(losses.size(), 30u) << r.out;
  EXPECT_LT(losses.back(), 0.25 * losses.front()) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("[1] step"))) << "only rank 0 reports the loss";
  EXPECT_THAT(r.out, HasSubstr("[0] troika-example-train: 4 ranks, global batch 256 (64 per"));
  // It ends with a summary: steps, wall time, steps/s, first -> last loss.
  std::smatch summary;
  ASSERT_TRUE(std::regex_search(
      r.out, summary,
      std::regex(R"(\[0\] troika-example-train: done: 30 steps in ([0-9.]+) s \(([0-9.]+) )"
                 R"(steps/s\), loss ([0-9.]+) -> ([0-9.]+)\n)")))
      << r.out;
  EXPECT_GT(std::stod(summary[1]), 0.0);
  EXPECT_GT(std::stod(summary[2]), 0.0);
  EXPECT_DOUBLE_EQ(std::stod(summary[3]), losses.front());
  EXPECT_DOUBLE_EQ(std::stod(summary[4]), losses.back());
  EXPECT_THAT(r.out, Not(HasSubstr("[1] troika-example-train: done"))) << "rank 0 only";
}

// --timeline (and $HOROVOD_TIMELINE, horovodrun's way): the embedded coordinator writes the
// job's timeline for the whole run, with every rank's phases, closed when the job ends.
TEST(TroikarunTest, TimelineFlagAndHorovodTimelineWriteTheJobsTimeline) {
  if (std::system("python3 -c pass") != 0) GTEST_SKIP() << "python3 is not installed";
  const std::string dir = MakeScratchDir("troikarun-timeline");
  const std::string check = absl::StrCat(
      "python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))[\"traceEvents\"]; "
      "ranks = {x[\"pid\"] for x in e if x.get(\"name\") == \"collective\"}; "
      "print(sorted(ranks)); sys.exit(ranks != {2, 3})' ");
  for (const std::string& how : {std::string("--timeline trace.json "), std::string("")}) {
    const std::string env = how.empty() ? "HOROVOD_TIMELINE=trace.json " : "";
    CommandResult r = RunShell(
        absl::StrCat("cd ", dir, " && rm -f trace.json && ", env, "exec ", TROIKARUN_BINARY,
                     " -np 2 ", how, "-- ", EXAMPLE_TRAIN_BINARY, " --steps 10"),
        dir, absl::Seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    CommandResult c =
        RunShell(absl::StrCat("cd ", dir, " && ", check, "trace.json"), dir, absl::Seconds(30));
    EXPECT_EQ(c.exit_code, 0) << (how.empty() ? "HOROVOD_TIMELINE" : how) << ": " << c.out << c.err;
  }
}

TEST(TroikarunTest, ExampleOnTwoAgentsOfTwoRanksSucceeds) {
  const std::string dir = MakeScratchDir("troikarun-agents");
  CommandResult r =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 4 --nproc-per-node 2 -- ",
                            EXAMPLE_TRAIN_BINARY, " --steps 20"),
               dir, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> losses = Losses(r.out);
  ASSERT_EQ(losses.size(), 20u) << r.out;
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("[0] [0]"))) << "troikarun does not prefix agents' lines again";
}

// Schedules (on unless --schedules off): once the example's steps repeat, its ranks run them on a
// schedule (the embedded coordinator says so at info level) through two agents, and training ends
// with the weights of a negotiated run, bit for bit. The ranks' progress reports, relayed by the
// agents, put every scheduled tensor on the timeline; at the end the first rank to shut down ends
// the schedule on every rank through the coordinator.
TEST(TroikarunTest, SchedulesOnTrainsToTheWeightsOfANegotiatedRun) {
  if (std::system("python3 -c pass") != 0) GTEST_SKIP() << "python3 is not installed";
  const std::string dir = MakeScratchDir("troikarun-schedules");
  std::string weights[2];
  for (bool on : {false, true}) {
    const std::string file = absl::StrCat(dir, on ? "/on.txt" : "/off.txt");
    CommandResult r = RunShell(
        absl::StrCat("exec ", TROIKARUN_BINARY, " -np 4 --nproc-per-node 2 --log_level info",
                     on ? "" : " --schedules off", " --timeline ", dir, "/trace.json -- ",
                     EXAMPLE_TRAIN_BINARY, " --steps 40 --dump_weights ", file),
        dir, absl::Seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("runs without negotiation") != std::string::npos, on) << r.err;
    EXPECT_EQ(r.err.find("deviated from schedule 1; ending it on every rank") != std::string::npos,
              on)
        << r.err;
    // 40 steps of 5 allreduces: each a negotiation span with every rank's arrival, whether
    // negotiated or scheduled.
    CommandResult spans = RunShell(
        absl::StrCat(
            "python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))[\"traceEvents\"]; "
            "s = [x for x in e if x.get(\"cat\") == \"negotiation\" and x.get(\"ph\") == \"X\" "
            "and x[\"args\"][\"ranks\"] == 4]; print(len(s))' ",
            dir, "/trace.json"),
        dir, absl::Seconds(30));
    ASSERT_EQ(spans.exit_code, 0) << spans.err;
    EXPECT_GE(std::atoi(spans.out.c_str()), 200) << (on ? "scheduled" : "negotiated");
    CommandResult cat = RunShell(absl::StrCat("cat ", file), dir, absl::Seconds(10));
    ASSERT_EQ(cat.exit_code, 0);
    ASSERT_FALSE(cat.out.empty());
    weights[on] = cat.out;
  }
  EXPECT_EQ(weights[0], weights[1]) << "the scheduled run's weights differ";
}

TEST(TroikarunTest, RanksGetTheirEnvironmentAndPrefixedOutput) {
  const std::string dir = MakeScratchDir("troikarun-env");
  CommandResult r = RunShell(Troikarun("-np 4 --nproc-per-node 2 --job myjob",
                                       "echo $TROIKA_RANK $TROIKA_SIZE $TROIKA_LOCAL_RANK "
                                       "$TROIKA_LOCAL_SIZE $TROIKA_DEVICE $TROIKA_JOB "
                                       "$TROIKA_COORDINATOR; echo oops >&2; "
                                       "printf unterminated"),
                             dir, absl::Seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string p = absl::StrCat("[", rank, "] ");
    const std::regex env(absl::StrCat("\\[", rank, "\\] ", rank, " 4 ", rank % 2, " 2 ", rank % 2,
                                      " myjob unix:/tmp/troika-agent-[0-9]+\\.sock\n"));
    EXPECT_TRUE(std::regex_search(r.out, env)) << r.out;
    EXPECT_THAT(r.out, HasSubstr(p + "unterminated\n"));
    EXPECT_THAT(r.err, HasSubstr(p + "oops\n"));
  }
}

// What a rank of `horovodrun --gloo` sees is there too: with one agent (the default) as
// horovodrun -np 3 on one host; with agents of 2 ranks, each agent a node of the job.
TEST(TroikarunTest, RanksGetHorovodsEnvironmentWithEachAgentANode) {
  const std::string script =
      "echo env $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_RANK $HOROVOD_LOCAL_SIZE "
      "$HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $HOROVOD_HOSTNAME $TROIKA_HOST";
  struct Case {
    int np, per_node;
  };
  for (const Case c : {Case{3, 3}, Case{4, 2}, Case{4, 1}}) {
    SCOPED_TRACE(absl::StrCat("-np ", c.np, " --nproc-per-node ", c.per_node));
    const std::string dir = MakeScratchDir("troikarun-horovod-env");
    // HOROVOD_RANK in troikarun's own environment is replaced, rank by rank.
    CommandResult r = RunShell(
        absl::StrCat(
            "HOROVOD_RANK=7 HOROVOD_HOSTNAME=elsewhere ",
            Troikarun(absl::StrCat("-np ", c.np, " --nproc-per-node ", c.per_node), script)),
        dir, absl::Seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int rank = 0; rank < c.np; ++rank) {
      const std::regex env(absl::StrCat("\\[", rank, "\\] env ", rank, " ", c.np, " ",
                                        rank % c.per_node, " ", c.per_node, " ", rank / c.per_node,
                                        " ", c.np / c.per_node, " (\\S+) (\\S+)\n"));
      std::smatch match;
      ASSERT_TRUE(std::regex_search(r.out, match, env)) << r.out;
      EXPECT_EQ(match[1], match[2]) << "HOROVOD_HOSTNAME is the agents' host name";
      EXPECT_NE(match[1], "elsewhere");
    }
  }
}

// The ranks of -np N over hosts, numbered as horovodrun numbers them (Horovod's
// test_get_host_assignments and _elastic, with two names of this machine as the hosts, so no
// ssh): each host filled in order up to its slots, local ranks within a host, cross ranks
// across hosts, HOROVOD_HOSTNAME the host as named; a --hostfile of the same hosts (Horovod's
// test_horovodrun_hostfile) gives the same. Each rank runs the command (test_gloo_run_minimal
// runs whoami). horovodrun also splits ranks over hosts in unequal blocks
// (test_get_host_assignments_heterogeneous); troikarun refuses that, saying why.
TEST(TroikarunTest, RanksOnListedHostsGetTheNumbersHorovodrunGivesThem) {
  const std::string dir = MakeScratchDir("troikarun-listed-hosts");
  std::ofstream(dir + "/hosts") << "localhost slots=2\n127.0.0.1 slots=2\n";
  const std::string script =
      "echo env $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_RANK $HOROVOD_LOCAL_SIZE "
      "$HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $HOROVOD_HOSTNAME; whoami";
  const passwd* user = getpwuid(geteuid());
  ASSERT_NE(user, nullptr);
  const std::vector<std::string> four = {
      "[0] env 0 4 0 2 0 2 localhost", "[1] env 1 4 1 2 0 2 localhost",
      "[2] env 2 4 0 2 1 2 127.0.0.1", "[3] env 3 4 1 2 1 2 127.0.0.1"};
  struct Case {
    std::string flags;
    std::vector<std::string> lines;
  };
  const std::vector<Case> cases = {
      {"-np 4 -H localhost:2,127.0.0.1:2", four},
      {absl::StrCat("-np 4 --hostfile ", dir, "/hosts"), four},
      {"-np 2 --min-np 1 --max-np 2 -H localhost:2,127.0.0.1:2",
       {"[0] env 0 2 0 2 0 1 localhost", "[1] env 1 2 1 2 0 1 localhost"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    CommandResult r = RunShell(Troikarun(c.flags, script), dir, absl::Seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (size_t rank = 0; rank < c.lines.size(); ++rank) {
      EXPECT_THAT(r.out, HasSubstr(c.lines[rank] + "\n"));
      EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[", rank, "] ", user->pw_name, "\n")));
    }
    EXPECT_THAT(r.out, Not(HasSubstr(absl::StrCat("[", c.lines.size(), "]"))));
  }
  CommandResult unequal =
      RunShell(Troikarun("-np 3 -H localhost:1,127.0.0.1:2", script), dir, absl::Seconds(60));
  EXPECT_EQ(unequal.exit_code, 2);
  EXPECT_THAT(unequal.err,
              HasSubstr("-np 3 over these hosts gives localhost 1, 127.0.0.1 2 ranks; troikarun "
                        "runs the same number of ranks on every host it uses"));
}

// Horovod's test_elastic_run.py: an elastic job (-np 2 --min-np 2 --max-np 2) on hosts given
// with -H, or printed by a host discovery script, each rank seeing its rank and the size.
TEST(TroikarunTest, ElasticJobsOnListedOrDiscoveredHostsRunEveryRank) {
  const std::string dir = MakeScratchDir("troikarun-elastic-hosts");
  const std::string discover = dir + "/discover.sh";
  std::ofstream(discover) << "#!/bin/sh\necho localhost:2\necho 127.0.0.1:2\n";
  ASSERT_EQ(chmod(discover.c_str(), 0700), 0);
  for (const std::string& hosts :
       {std::string("-H localhost:2,127.0.0.1:2"), "--host-discovery-script " + discover}) {
    SCOPED_TRACE(hosts);
    CommandResult r = RunShell(
        Troikarun("-np 2 --min-np 2 --max-np 2 " + hosts, "echo rank $HOROVOD_RANK $HOROVOD_SIZE"),
        dir, absl::Seconds(60));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("[0] rank 0 2\n"));
    EXPECT_THAT(r.out, HasSubstr("[1] rank 1 2\n"));
    EXPECT_THAT(r.out, Not(HasSubstr("[2]")));
  }
}

// A progress bar that redraws its line with '\r' is shown as it goes, each piece prefixed, as
// horovodrun shows it (Horovod's test_prefix_connection_does_stream): the rank goes on only once
// the test has seen its piece on troikarun's stdout.
TEST(TroikarunTest, APieceEndedByACarriageReturnIsShownAtOnce) {
  const std::string dir = MakeScratchDir("troikarun-progress");
  const pid_t troikarun = StartShell(absl::StrCat(
      Troikarun("-np 1", absl::StrCat("printf \" 50%%\\r\"; while [ ! -e ", dir,
                                      "/seen ]; do sleep 0.05; done; printf \" 100%%\\n\"")),
      " >", dir, "/stdout 2>", dir, "/stderr"));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool seen = false;
  while (!seen && absl::Now() < deadline) {
    seen = ReadFile(dir + "/stdout").find("[0]  50%\r") != std::string::npos;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(seen) << "held back: " << ReadFile(dir + "/stdout");
  std::ofstream(dir + "/seen") << "";
  EXPECT_EQ(WaitWithTimeout(troikarun, absl::Seconds(60)), 0) << ReadFile(dir + "/stderr");
  EXPECT_EQ(ReadFile(dir + "/stdout"), "[0]  50%\r[0]  100%\n");
}

// Killed with SIGKILL, troikarun cannot stop its ranks: its agents notice that it is gone and
// stop them (Horovod's test_safe_shell_exec_interrupts_on_parent_shutdown; across hosts:
// ssh_hosts_test).
TEST(TroikarunTest, KillingTroikarunStopsEveryRank) {
  const std::string dir = MakeScratchDir("troikarun-killed");
  const pid_t troikarun = StartShell(absl::StrCat(
      Troikarun("-np 3", absl::StrCat("echo $$ > ", dir, "/pid.$TROIKA_RANK; exec sleep 600")),
      " >", dir, "/stdout 2>", dir, "/stderr"));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadRankPids(dir, 3).size() < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::vector<pid_t> pids = ReadRankPids(dir, 3);
  ASSERT_EQ(pids.size(), 3u) << "the ranks did not start";
  ASSERT_EQ(kill(troikarun, SIGKILL), 0);
  EXPECT_EQ(WaitWithTimeout(troikarun, absl::Seconds(10)), 128 + SIGKILL);
  const absl::Time gone_by = absl::Now() + absl::Seconds(30);
  for (pid_t pid : pids) {
    while (!ProcessGone(pid) && absl::Now() < gone_by) absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(ProcessGone(pid)) << pid;
  }
}

TEST(TroikarunTest, RankExitingNonZeroFailsTheJobNamingItAndStopsEveryRank) {
  const std::string dir = MakeScratchDir("troikarun-fail");
  // Rank 2 fails once every rank runs (has written its pid).
  CommandResult r = RunShell(
      Troikarun("-np 4",
                absl::StrCat("echo $$ > ", dir, "/pid.$TROIKA_RANK; if [ $TROIKA_RANK = 2 ]; ",
                             "then ", WaitForPidFiles(dir, 4), "exit 1; fi; exec sleep 600")),
      dir, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.elapsed, absl::Seconds(90)) << "the other ranks were not stopped";
  EXPECT_THAT(r.err, HasSubstr("troika-agent: rank 2 exited with code 1; stopping the other 3"));
  EXPECT_THAT(r.err, HasSubstr("troika-agent: job aborted: rank 2 on "));
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("troikarun: job failed: rank 2 on \\S+ exited with code 1\n")))
      << r.err;
  std::vector<pid_t> pids = ReadRankPids(dir, 4);
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST(TroikarunTest, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  const std::string dir = MakeScratchDir("troikarun-kill");
  // Every rank ignores SIGTERM before it writes its pid; rank 0 dies once all have.
  CommandResult r =
      RunShell(Troikarun("-np 3 --grace_period 1s",
                         absl::StrCat("trap \"\" TERM; echo $$ > ", dir,
                                      "/pid.$TROIKA_RANK; if [ $TROIKA_RANK = 0 ]; then ",
                                      WaitForPidFiles(dir, 3), "kill -9 $$; fi; exec sleep 600")),
               dir, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_LT(r.elapsed, absl::Seconds(90)) << "the ranks were not killed";
  EXPECT_THAT(r.err, HasSubstr("troika-agent: rank 0 was killed by signal 9 (Killed)"));
  EXPECT_THAT(r.err, HasSubstr("sent SIGKILL to ranks 1, 2 (still running 1s after"));
  for (pid_t pid : ReadRankPids(dir, 3)) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

// The other ranks are blocked inside troika::Context::Init, waiting for the dead rank.
TEST(TroikarunTest, FailingRankStopsRanksBlockedInTroika) {
  const std::string dir = MakeScratchDir("troikarun-blocked");
  CommandResult r = RunShell(
      Troikarun("-np 4", absl::StrCat("echo $$ > ", dir,
                                      "/pid.$TROIKA_RANK; if [ $TROIKA_RANK = 2 ]; then sleep 1; "
                                      "exit 3; fi; exec ",
                                      EXAMPLE_TRAIN_BINARY, " --steps 1000000")),
      dir, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_LT(r.elapsed, absl::Seconds(90)) << "the blocked ranks were not stopped";
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("troikarun: job failed: rank 2 on \\S+ exited with code 3\n")))
      << r.err;
  for (pid_t pid : ReadRankPids(dir, 4)) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST(TroikarunTest, SigtermIsForwardedToEveryRank) {
  const std::string dir = MakeScratchDir("troikarun-signal");
  const pid_t troikarun = StartShell(absl::StrCat(
      Troikarun("-np 2", absl::StrCat("trap \"echo got TERM; exit 7\" TERM; echo $$ > ", dir,
                                      "/pid.$TROIKA_RANK; while :; do sleep 0.05; done")),
      " >", dir, "/stdout 2>", dir, "/stderr"));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadRankPids(dir, 2).size() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<pid_t> pids = ReadRankPids(dir, 2);
  ASSERT_EQ(pids.size(), 2u) << "the ranks did not start";
  ASSERT_EQ(kill(troikarun, SIGTERM), 0);
  EXPECT_EQ(WaitWithTimeout(troikarun, absl::Seconds(60)), 128 + SIGTERM);
  const std::string out = ReadFile(dir + "/stdout");
  EXPECT_THAT(out, HasSubstr("[0] got TERM\n"));
  EXPECT_THAT(out, HasSubstr("[1] got TERM\n"));
  EXPECT_THAT(ReadFile(dir + "/stderr"),
              HasSubstr("troikarun: job failed: stopped by signal 15 (Terminated)"));
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST(TroikarunTest, CommandNotFoundIsAClearError) {
  const std::string dir = MakeScratchDir("troikarun-notfound");
  CommandResult r =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 2 -- troika-no-such-program --flag"),
               dir, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("troika-agent: rank 0: command 'troika-no-such-program' not "
                               "found in PATH\n"));
  EXPECT_THAT(r.err, HasSubstr("troikarun: job failed: agent 0 exited with code 127\n"));
}

TEST(TroikarunTest, UsageErrorsExitTwoWithAMessage) {
  const std::string dir = MakeScratchDir("troikarun-usage");
  CommandResult missing =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 2"), dir, absl::Seconds(30));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("no command: troikarun [options] COMMAND"));
  CommandResult refused = RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 2 --mpi true"),
                                   dir, absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--mpi is horovodrun's and has no equivalent"));
  CommandResult zero =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " -np 0 -- true"), dir, absl::Seconds(30));
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("-np must be between 1 and 1024, got 0"));
}

TEST(TroikarunTest, HelpDescribesEveryOptionAndExitsZero) {
  const std::string dir = MakeScratchDir("troikarun-help");
  CommandResult r =
      RunShell(absl::StrCat("exec ", TROIKARUN_BINARY, " --help"), dir, absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 0);
  for (const char* text : {"-np N", "--nproc-per-node P", "--coordinator HOST:PORT", "--job NAME",
                           "--grace_period", "--log_level", "troika-agent", "TROIKA_LOCAL_RANK",
                           "TROIKA_DEVICE", "Exit status", "127"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

}  // namespace
}  // namespace troika::testing
