// troikarun across hosts as users launch it: `troikarun -np 4 -H h1:2,h2:2 -- python3 ...`,
// the hosts network namespaces (netns_hosts.h) each running Debian's sshd with keys this test
// generates, troikarun in a namespace of its own reaching them over ssh
// (TROIKA_SSH_COMMAND="ssh -F <this test's ssh_config>", which names the hosts). Needs root
// and openssh-server: skips, saying why, without them.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"
#include "tests/integration/netns_hosts.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kSshd[] = "/usr/sbin/sshd";

class SshHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir("ssh-hosts");
    hosts_ = std::make_unique<NetnsHosts>(absl::StrCat("tks", getpid() % 100000), "10.233.0", dir_);
    if (std::string why = hosts_->Unavailable(); !why.empty()) GTEST_SKIP() << why;
    if (access(kSshd, X_OK) != 0) GTEST_SKIP() << "needs sshd (Debian: openssh-server)";
    // c runs troikarun; h1, h2 and h3 are hosts (h3 has no sshd unless a test starts one).
    ASSERT_TRUE(hosts_->Create({"c", "h1", "h2", "h3"}));
    ASSERT_EQ(
        NetnsHosts::Sh(absl::StrCat("mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f ",
                                    dir_, "/hostkey && ssh-keygen -q -t ed25519 -N '' -f ", dir_,
                                    "/id && cp ", dir_, "/id.pub ", dir_, "/authorized_keys")),
        0);
    std::ofstream config(dir_ + "/ssh_config");
    for (const char* host : {"h1", "h2", "h3"}) {
      config << "Host " << host << "\n  HostName " << hosts_->Address(host) << "\n";
    }
    config
        << "Host *\n  IdentityFile " << dir_ << "/id\n  UserKnownHostsFile " << dir_
        << "/known_hosts\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n  LogLevel ERROR\n";
    config.close();
    StartSshd("h1");
    StartSshd("h2");
  }

  void StartSshd(const std::string& host) {
    const std::string config = absl::StrCat(dir_, "/sshd_", host);
    std::ofstream(config) << "ListenAddress " << hosts_->Address(host) << "\nHostKey " << dir_
                          << "/hostkey\nAuthorizedKeysFile " << dir_
                          << "/authorized_keys\nPermitRootLogin prohibit-password\n"
                          << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                          << "UsePAM no\nStrictModes no\nPidFile none\n";
    hosts_->Start(host, absl::StrCat(kSshd, " -D -e -f ", config), "sshd-" + host);
    // Listening once an ssh command gets through.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (RunIn("c", Ssh() + " " + host + " true", absl::Seconds(20)).exit_code != 0) {
      ASSERT_LT(absl::Now(), deadline)
          << "sshd on " << host
          << " does not answer: " << ReadFile(absl::StrCat(dir_, "/sshd-", host, ".err"));
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  std::string Ssh() const { return absl::StrCat("ssh -F ", dir_, "/ssh_config"); }

  CommandResult RunIn(const std::string& host, const std::string& command, absl::Duration timeout) {
    return RunShell(absl::StrCat("ip netns exec ", hosts_->Namespace(host), " ", command), dir_,
                    timeout);
  }

  // troikarun ARGS in c, with the ssh settings and the Python path of this build.
  std::string Troikarun(const std::string& args) const {
    return absl::StrCat("env TROIKA_SSH_COMMAND='", Ssh(), "' PYTHONPATH=", PYTHON_DIR, " ",
                        TROIKARUN_BINARY, " ", args);
  }

  std::string Train(const std::string& args) const {
    return absl::StrCat(PYTHON_EXECUTABLE, " ", ELASTIC_TRAIN_SCRIPT, " --batch-sleep-ms 0 ", args);
  }

  // Every process left on the hosts but their sshd (a connection's sshd ends with it).
  std::vector<std::string> LeftOnHosts() {
    std::vector<std::string> left;
    for (const char* host : {"h1", "h2", "h3"}) {
      for (const std::string& p : hosts_->Processes(host, {"sshd"})) {
        left.push_back(absl::StrCat(host, ": ", p));
      }
    }
    return left;
  }

  // The "weights H" every rank printed; fails unless all `ranks` printed the same.
  static std::string Weights(const std::string& out, int ranks) {
    std::set<std::string> hashes;
    std::set<int> seen;
    const std::regex line(R"(\[(\d+)\] done epochs \d+ size (\d+) weights (\S+))");
    for (std::sregex_iterator m(out.begin(), out.end(), line), end; m != end; ++m) {
      seen.insert(std::stoi((*m)[1]));
      EXPECT_EQ((*m)[2], std::to_string(ranks));
      hashes.insert((*m)[3]);
    }
    EXPECT_EQ(static_cast<int>(seen.size()), ranks) << out;
    EXPECT_EQ(hashes.size(), 1u) << out;
    return hashes.empty() ? "" : *hashes.begin();
  }

  // Starts a training job of 4 ranks on h1 and h2 (troikarun in c) and waits until every rank
  // trains (wrote its pid); troikarun's pid.
  pid_t StartTrainingOnTwoHosts() {
    const pid_t run = hosts_->Start(
        "c", Troikarun("-np 4 -H h1:2,h2:2 -- " + Train("--epochs 1000 --pid-dir " + dir_)), "run");
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (ReadRankPids(dir_, 4).size() < 4 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(ReadRankPids(dir_, 4).size(), 4u) << ReadFile(dir_ + "/run.err");
    // What LeftOnHosts() later finds gone is seen here: each host's agent and ranks.
    const std::vector<std::string> running = LeftOnHosts();
    for (const char* host : {"h1: ", "h2: "}) {
      EXPECT_EQ(std::count_if(running.begin(), running.end(),
                              [&](const std::string& p) { return absl::StartsWith(p, host); }),
                3)
          << "an agent and two ranks on " << host << absl::StrJoin(running, "; ");
    }
    return run;
  }

  // LeftOnHosts(), once it is empty or after 30 s.
  std::vector<std::string> LeftOnHostsSoon() {
    const absl::Time gone_by = absl::Now() + absl::Seconds(30);
    std::vector<std::string> left = LeftOnHosts();
    while (!left.empty() && absl::Now() < gone_by) {
      absl::SleepFor(absl::Milliseconds(100));
      left = LeftOnHosts();
    }
    return left;
  }

  // The pid of the troika-agent on `host`, or 0.
  pid_t AgentOn(const std::string& host) {
    for (const std::string& p : hosts_->Processes(host, {})) {
      if (absl::EndsWith(p, " troika-agent")) return std::stoi(p);
    }
    return 0;
  }

  // An executable discovery script printing the file it returns (DIR/hosts), which holds
  // `hosts` for now; SetHosts replaces it whole.
  std::string DiscoveryScript(const std::string& hosts) {
    SetHosts(hosts);
    const std::string script = dir_ + "/discover.sh";
    std::ofstream(script) << "#!/bin/sh\ncat " << dir_ << "/hosts\n";
    chmod(script.c_str(), 0755);
    return script;
  }
  void SetHosts(const std::string& hosts) {
    std::ofstream(dir_ + "/hosts.new") << hosts;
    std::rename((dir_ + "/hosts.new").c_str(), (dir_ + "/hosts").c_str());
  }

  // Waits until DIR/run.out and run.err hold `text` `count` times, while `run` lives.
  bool WaitForOutput(pid_t run, const std::string& text, int count = 1) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (true) {
      const std::string out = ReadFile(dir_ + "/run.out") + ReadFile(dir_ + "/run.err");
      int found = 0;
      for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) {
        ++found;
      }
      if (found >= count) return true;
      if (absl::Now() > deadline || ProcessGone(run)) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  // chaos_job.py's command line, no kills.
  static std::string ChaosJob(int seed, int steps) {
    return absl::StrCat(PYTHON_EXECUTABLE, " ", CHAOS_JOB_SCRIPT, " --seed ", seed,
                        " --kills 0 --steps ", steps, " --step-sleep-ms 30");
  }

  // Every rank of `out` that finished `steps` steps of chaos_job.py as one of `size` ranks
  // has the same weights, equal (float64, 1e-9) to one process trained on the same batches.
  void ExpectReferenceWeights(const std::string& out, int seed, int steps, int size) {
    std::set<std::string> weights;
    const std::regex done(
        absl::StrCat(R"(\[(\d+)\] done steps )", steps, " size ", size, R"( weights ([^\n]+))"));
    for (std::sregex_iterator m(out.begin(), out.end(), done), end; m != end; ++m) {
      weights.insert((*m)[2]);
    }
    ASSERT_EQ(weights.size(), 1u) << "every rank of the last generation, the same weights:\n"
                                  << out;
    CommandResult reference =
        RunShell(absl::StrCat(PYTHON_EXECUTABLE, " ", CHAOS_JOB_SCRIPT, " --reference --seed ",
                              seed, " --steps ", steps),
                 dir_, absl::Seconds(120));
    ASSERT_EQ(reference.exit_code, 0) << reference.err;
    const std::string marker = "reference weights";
    const std::vector<double> want =
        HexWeights(reference.out.substr(reference.out.find(marker) + marker.size()));
    const std::vector<double> got = HexWeights(*weights.begin());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-9 * std::max(std::fabs(want[i]), 1e-12)) << "weight " << i;
    }
  }

  // The hex-float weights a chaos_job.py line ends with.
  static std::vector<double> HexWeights(const std::string& text) {
    std::vector<double> values;
    std::istringstream in(text);
    for (std::string word; in >> word;) values.push_back(std::strtod(word.c_str(), nullptr));
    return values;
  }

  std::string dir_;
  std::unique_ptr<NetnsHosts> hosts_;
};

// Four ranks on two hosts train the model to the same bits as the same job on one machine
// (two agents named as two hosts: the same hierarchical data plane), every line prefixed with
// its rank and, with --output-filename, in a file per rank on troikarun's machine; nothing is
// left on the hosts.
TEST_F(SshHostsTest, TrainsOnTwoHostsToTheWeightsOfTheSameJobOnOneMachine) {
  const std::string train = Train("--epochs 2 --num-samples 512");
  CommandResult hosts = RunIn(
      "c",
      Troikarun("-np 4 -H h1:2,h2:2 --verbose --output-filename " + dir_ + "/ranks -- " + train),
      absl::Seconds(120));
  ASSERT_EQ(hosts.exit_code, 0) << hosts.out << hosts.err;
  // --output-filename: each rank's lines, without the prefix, in a file of its own here.
  EXPECT_THAT(ReadFile(dir_ + "/ranks/rank.3/stdout"),
              ::testing::StartsWith("done epochs 2 size 4"));
  EXPECT_THAT(hosts.err, HasSubstr("the data plane uses eth0"));
  EXPECT_THAT(hosts.err, HasSubstr("2 nodes: shared memory within a node, Gloo between nodes"));
  CommandResult one =
      RunIn("c", Troikarun("-np 4 -H localhost:2,127.0.0.1:2 -- " + train), absl::Seconds(120));
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_EQ(Weights(hosts.out, 4), Weights(one.out, 4));
  EXPECT_THAT(LeftOnHosts(), IsEmpty());
}

// A host that cannot be reached fails the launch before anything starts, each such host named
// with why (ssh's words), and nothing runs on the reachable host.
TEST_F(SshHostsTest, AnUnreachableHostFailsTheLaunchAtOnceNamingIt) {
  CommandResult run =
      RunIn("c", Troikarun("-np 6 -H h1:2,h3:2,nosuchhost:2 --start-timeout 20 -- true"),
            absl::Seconds(60));
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_LT(run.elapsed, absl::Seconds(20)) << "a refused connection fails at once";
  EXPECT_THAT(run.err, HasSubstr("h3: unreachable: ssh: connect to host 10.233.0.4 port 22: "
                                 "Connection refused"));
  EXPECT_THAT(run.err, HasSubstr("nosuchhost: unreachable: ssh: Could not resolve hostname"));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("h1:")));
  EXPECT_THAT(LeftOnHosts(), IsEmpty());
}

// SIGINT to troikarun while the job trains: every remote agent stops its ranks and exits
// before troikarun does, and troikarun exits 130; nothing is left on any host.
TEST_F(SshHostsTest, InterruptingTroikarunLeavesNoProcessOnAnyHost) {
  const pid_t run = StartTrainingOnTwoHosts();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(kill(run, SIGINT), 0);
  EXPECT_EQ(WaitWithTimeout(run, absl::Seconds(60)), 130) << ReadFile(dir_ + "/run.err");
  EXPECT_THAT(LeftOnHosts(), IsEmpty()) << ReadFile(dir_ + "/run.err");
}

// SIGKILL to troikarun (it cannot stop anything itself): its ssh connections' stdin ends, so
// every remote agent stops its ranks; nothing is left on any host within seconds.
TEST_F(SshHostsTest, KillingTroikarunLeavesNoProcessOnAnyHost) {
  const pid_t run = StartTrainingOnTwoHosts();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(kill(run, SIGKILL), 0);
  EXPECT_EQ(WaitWithTimeout(run, absl::Seconds(10)), 128 + SIGKILL);
  EXPECT_THAT(LeftOnHostsSoon(), IsEmpty());
}

// A remote agent killed (SIGKILL) while the job trains: the job fails on every host within
// seconds, troikarun's summary names the agent, its host and what ssh's code means, and
// nothing is left on any host.
TEST_F(SshHostsTest, ARemoteAgentKilledFailsTheJobWithinSecondsNamingItsHost) {
  const pid_t run = StartTrainingOnTwoHosts();
  ASSERT_FALSE(HasFatalFailure());
  const pid_t agent = AgentOn("h2");
  ASSERT_GT(agent, 0);
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  EXPECT_EQ(WaitWithTimeout(run, absl::Seconds(60)), 255) << ReadFile(dir_ + "/run.err");
  EXPECT_LT(absl::Now() - killed, absl::Seconds(15)) << "the job must end in seconds";
  // Whichever saw it first names the host: the coordinator (the agent's session broke) or
  // troikarun (its ssh ended).
  const std::string err = ReadFile(dir_ + "/run.err");
  const std::string summary = err.substr(err.rfind("troikarun: job failed: "));
  EXPECT_THAT(summary,
              ::testing::AnyOf(HasSubstr("ranks 2-3 on h2 lost the connection to the coordinator"),
                               HasSubstr("agent 1 on h2 exited with code 255 (ssh's code: the "
                                         "connection to the host failed, or the agent there was "
                                         "killed)")))
      << err;
  EXPECT_THAT(LeftOnHostsSoon(), IsEmpty());
}

// TLS across hosts: the embedded coordinator serves a certificate naming troikarun's address on
// the hosts' network, every agent verifies it with the CA troikarun gives it, and the job runs;
// agents given another CA refuse the coordinator, and the launch fails instead of falling back
// to plaintext.
TEST_F(SshHostsTest, TheCoordinatorServesTlsAcrossHostsAndAWrongCaFailsTheLaunch) {
  const std::string make = absl::StrCat(
      "cd ", dir_, " && key='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'",
      " && openssl req -x509 $key -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca",
      " && openssl req -x509 $key -keyout other.key -out other.crt -days 2 -subj /CN=other-ca",
      " && openssl req $key -keyout server.key -out server.csr -subj /CN=troikarun",
      " && printf 'subjectAltName=IP:", hosts_->Address("c"),
      ",IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext",
      " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2",
      " -out server.crt -extfile ext");
  ASSERT_EQ(RunShell(make, dir_, absl::Seconds(60)).exit_code, 0) << ReadFile(dir_ + "/stderr");
  auto tls = [&](const std::string& ca) {
    return absl::StrCat("--tls-cert ", dir_, "/server.crt --tls-key ", dir_, "/server.key ",
                        "--tls-ca ", dir_, "/", ca);
  };
  CommandResult run = RunIn(
      "c", Troikarun(absl::StrCat("-np 4 -H h1:2,h2:2 ", tls("ca.crt"), " -- ", CHECK_RANK_BINARY)),
      absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("check ok on rank 3 of 4 (host h2)"));
  CommandResult refused = RunIn(
      "c",
      Troikarun(absl::StrCat("-np 4 -H h1:2,h2:2 ", tls("other.crt"), " -- ", CHECK_RANK_BINARY)),
      absl::Seconds(120));
  EXPECT_NE(refused.exit_code, 0) << refused.out << refused.err;
  EXPECT_THAT(refused.out, ::testing::Not(HasSubstr("check ok")));
  EXPECT_THAT(refused.err, HasSubstr("certificate verify failed"));
  EXPECT_THAT(LeftOnHosts(), IsEmpty());
}

// An elastic job across hosts (--host-discovery-script) grows to a third host and shrinks back
// as the script's output changes while it trains: the new host's ranks join at a commit, the
// removed host's ranks leave at a commit (drained: nothing lost), and the job finishes with
// the weights of one process trained on the same global batches (chaos_job.py, no kills).
TEST_F(SshHostsTest, AnElasticJobGrowsToAThirdHostAndShrinksBackAsDiscoverySays) {
  StartSshd("h3");
  const std::string script = DiscoveryScript("h1:2\nh2:2\n");
  const pid_t run =
      hosts_->Start("c",
                    Troikarun(absl::StrCat("-np 4 --min-np 2 --max-np 6 --host-discovery-script ",
                                           script, " -- ", ChaosJob(7, 400))),
                    "run");
  // Rank 0 prints "step S size N generation G" after every step.
  ASSERT_TRUE(WaitForOutput(run, "size 4 generation 1")) << ReadFile(dir_ + "/run.err");
  SetHosts("h1:2\nh2:2\nh3:2\n");
  ASSERT_TRUE(WaitForOutput(run, "size 6 generation 2")) << ReadFile(dir_ + "/run.err");
  SetHosts("h1:2\nh2:2\n");
  ASSERT_TRUE(WaitForOutput(run, "size 4 generation 3")) << ReadFile(dir_ + "/run.err");
  EXPECT_EQ(WaitWithTimeout(run, absl::Seconds(180)), 0) << ReadFile(dir_ + "/run.err");
  const std::string err = ReadFile(dir_ + "/run.err");
  EXPECT_THAT(err, HasSubstr("h3 was discovered: its 2 ranks join the job at its next commit"));
  EXPECT_THAT(err, HasSubstr("h3 left the host discovery output: its ranks leave the job at its "
                             "next commit"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("exited with code")))
      << "the drained ranks leave with 0, and no rank fails";
  ExpectReferenceWeights(ReadFile(dir_ + "/run.out"), 7, 400, 4);
  EXPECT_THAT(LeftOnHosts(), IsEmpty());
}

// Failures during growth: a discovered host's agent is killed after its ranks joined. The job
// goes on without them (from the last commit), troikarun leaves the host out for its cooldown
// (--blacklist-cooldown-range 1 2), then, the script still listing it, gives it an agent
// again, whose ranks join at a commit; the host then leaves the script's output and is drained.
// The job finishes with the 1-process reference weights: nothing committed was lost or done
// twice.
TEST_F(SshHostsTest, AFailedHostCoolsDownRejoinsAndIsDrainedWhileTheJobTrains) {
  StartSshd("h3");
  const std::string script = DiscoveryScript("h1:2\nh2:2\nh3:2\n");
  const pid_t run = hosts_->Start(
      "c",
      Troikarun(absl::StrCat("-np 4 --min-np 2 --max-np 6 --host-discovery-script ", script,
                             " --blacklist-cooldown-range 1 2 -- ", ChaosJob(11, 500))),
      "run");
  // -np 4 starts on h1 and h2; h3, listed too, joins at the first commit.
  ASSERT_TRUE(WaitForOutput(run, "size 6 generation 2")) << ReadFile(dir_ + "/run.err");
  const pid_t agent = AgentOn("h3");
  ASSERT_GT(agent, 0);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_TRUE(WaitForOutput(run, "size 4 generation 3")) << ReadFile(dir_ + "/run.err");
  ASSERT_TRUE(WaitForOutput(run, "h3 was discovered", 2))
      << "after its cooldown: " << ReadFile(dir_ + "/run.err");
  ASSERT_TRUE(WaitForOutput(run, "size 6 generation 4")) << ReadFile(dir_ + "/run.err");
  SetHosts("h1:2\nh2:2\n");
  ASSERT_TRUE(WaitForOutput(run, "size 4 generation 5")) << ReadFile(dir_ + "/run.err");
  EXPECT_EQ(WaitWithTimeout(run, absl::Seconds(180)), 0) << ReadFile(dir_ + "/run.err");
  EXPECT_THAT(ReadFile(dir_ + "/run.err"),
              ::testing::ContainsRegex("the agent on h3 exited with code 255; the host is left out "
                                       "until its cooldown ends in [0-2]s"));
  ExpectReferenceWeights(ReadFile(dir_ + "/run.out"), 11, 500, 4);
  EXPECT_THAT(LeftOnHosts(), IsEmpty());
}

}  // namespace
}  // namespace troika::testing
