// The launch parts troikarun uses across hosts: the environment block, the control pipe,
// interfaces, rank placement on hosts, ssh command lines and the host check (with a fake ssh).

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/launch/control_pipe_launcher.h"
#include "agent/launch/environment_block.h"
#include "agent/launch/interfaces.h"
#include "agent/launch/posix_process_launcher.h"
#include "agent/launcher/agent_commands.h"
#include "agent/launcher/host_check.h"
#include "agent/launcher/hosts.h"
#include "agent/launcher/layout.h"
#include "agent/launcher/ssh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/memory_sink.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A pipe whose write end is fed `text` and closed.
int PipeWith(const std::string& text) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  EXPECT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  return fds[0];
}

TEST(EnvironmentBlockTest, RoundTripsValuesWithAnyByteButNulAndStopsAtItsEnd) {
  const std::vector<std::string> entries = {"A=1", "B=two words\nand a line", "EMPTY="};
  const int fd = PipeWith(EncodeEnvironmentBlock(entries) + "after");
  absl::StatusOr<std::vector<std::string>> read = ReadEnvironmentBlock(fd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, entries);
  char rest[16] = {};
  EXPECT_EQ(::read(fd, rest, sizeof(rest)), 5);  // what follows the block is not consumed
  EXPECT_STREQ(rest, "after");
  close(fd);
}

TEST(EnvironmentBlockTest, AnUnfinishedOrMalformedBlockIsAnError) {
  int fd = PipeWith(std::string("A=1\0B=2", 7));
  absl::StatusOr<std::vector<std::string>> read = ReadEnvironmentBlock(fd);
  close(fd);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("ended early"));
  EXPECT_THAT(read.status().message(), HasSubstr("after 1 entries"));
  fd = PipeWith(std::string("NOEQUALS\0\0", 10));
  read = ReadEnvironmentBlock(fd);
  close(fd);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("'NOEQUALS', not NAME=value"));
}

TEST(EnvironmentBlockTest, ForwardsWhatHorovodrunForwardsButThisHostsOwn) {
  EXPECT_THAT(ForwardedEnvironment({"PATH=/bin", "TROIKA_X=1", "HOROVOD_Y=2", "OLDPWD=/a", "PWD=/b",
                                    "BASH_FUNC_f%%=() {}", "CUDA_VISIBLE_DEVICES=0",
                                    "NVIDIA_CUDA_VISIBLE_DEVICES=1", "SSH_CONNECTION=1 2 3 4",
                                    "HOSTNAME=me", "SHLVL=2", "_=/usr/bin/env", "PYTHONPATH=p"}),
              ElementsAre("PATH=/bin", "TROIKA_X=1", "HOROVOD_Y=2", "PYTHONPATH=p"));
}

TEST(ControlPipeLauncherTest, WritesTheInputAndStopsTheProcessByClosingItsStdin) {
  PosixProcessLauncher posix;
  ControlPipeLauncher launcher(posix);
  ProcessSpec spec{{"/bin/sh", "-c", "read line; echo got $line; cat >/dev/null; echo eof"},
                   {"PATH=/usr/bin:/bin"}};
  spec.control_input = "hello\n";
  absl::StatusOr<std::unique_ptr<Process>> process = launcher.Launch(spec);
  ASSERT_TRUE(process.ok()) << process.status();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE((*process)->TryReap().has_value()) << "the process must wait for its stdin to end";
  (*process)->Signal(SIGTERM);  // closes stdin: `cat` ends, the shell prints and exits 0
  const ExitStatus exit = (*process)->Wait();
  EXPECT_TRUE(exit.ok()) << exit.ToString();
  std::string out(256, '\0');
  const ssize_t n = read((*process)->stdout_fd(), out.data(), out.size());
  ASSERT_GT(n, 0);
  out.resize(static_cast<size_t>(n));
  EXPECT_EQ(out, "got hello\neof\n");
}

TEST(ControlPipeLauncherTest, SigkillIsSentAsIsAndPlainSpecsPassThrough) {
  PosixProcessLauncher posix;
  ControlPipeLauncher launcher(posix);
  ProcessSpec spec{{"/bin/sh", "-c", "trap '' TERM; sleep 30"}, {"PATH=/usr/bin:/bin"}};
  spec.control_input = "";
  absl::StatusOr<std::unique_ptr<Process>> process = launcher.Launch(spec);
  ASSERT_TRUE(process.ok()) << process.status();
  (*process)->Signal(SIGKILL);
  EXPECT_EQ((*process)->Wait().signal, SIGKILL);
  // Without control input: stdin is /dev/null, and SIGTERM is a signal.
  absl::StatusOr<std::unique_ptr<Process>> plain =
      launcher.Launch({{"/bin/sh", "-c", "cat; sleep 30"}, {"PATH=/usr/bin:/bin"}});
  ASSERT_TRUE(plain.ok());
  (*plain)->Signal(SIGTERM);
  EXPECT_EQ((*plain)->Wait().signal, SIGTERM);
  // A PosixProcessLauncher alone refuses a control pipe rather than ignoring it.
  EXPECT_THAT(posix.Launch(spec).status().message(), HasSubstr("needs a ControlPipeLauncher"));
}

TEST(InterfacesTest, ThisHostHasLoopbackAndTheListRoundTrips) {
  const std::vector<NetworkInterface> interfaces = Ipv4Interfaces();
  bool loopback = false;
  for (const NetworkInterface& i : interfaces) loopback |= i.loopback && i.address == "127.0.0.1";
  EXPECT_TRUE(loopback) << FormatInterfaces(interfaces);
  EXPECT_EQ(ParseInterfaces(FormatInterfaces(interfaces)), interfaces);
  EXPECT_EQ(*InterfaceAddress({"no-such-if", "lo"}), "127.0.0.1");
  EXPECT_THAT(InterfaceAddress({"no-such-if"}).status().message(),
              HasSubstr("no interface named no-such-if"));
  EXPECT_THAT(ParseInterfaces("eth0 10.0.0.1\nnot an interface line\neth1 300.1.1.1\n"),
              ElementsAre(NetworkInterface{"eth0", "10.0.0.1", false}));
}

TEST(HostsTest, FillsHostsInOrderUpToTheirSlots) {
  EXPECT_THAT(*AssignRanks({{"a", 2}, {"b", 2}}, 4),
              ElementsAre(HostAssignment{"a", 2}, HostAssignment{"b", 2}));
  EXPECT_THAT(*AssignRanks({{"a", 4}, {"b", 4}}, 4), ElementsAre(HostAssignment{"a", 4}));
  EXPECT_THAT(AssignRanks({{"a", 2}, {"b", 1}}, 4).status().message(),
              HasSubstr("-np 4 needs 4 slots; the hosts have 3: a:2, b:1"));
  EXPECT_THAT(AssignRanks({{"a", 2}, {"b", 2}}, 3).status().message(),
              HasSubstr("gives a 2, b 1 ranks"));
  EXPECT_THAT(AssignRanks({{"a", 2}, {"a", 2}}, 4).status().message(),
              HasSubstr("host a is named twice"));
  EXPECT_TRUE(IsThisHost("localhost"));
  EXPECT_TRUE(IsThisHost("127.0.0.1"));
  EXPECT_TRUE(IsThisHost(HostName()));
  EXPECT_FALSE(IsThisHost("10.1.2.3"));
}

TEST(SshTest, CommandLinesNeverPromptAndQuoteForTheRemoteShell) {
  SshOptions options;
  options.port = 2222;
  options.identity_file = "/k/id";
  options.connect_timeout = absl::Milliseconds(1500);
  EXPECT_THAT(SshArgv(options, "h1", "true"),
              ElementsAre("ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
                          "-o", "ConnectTimeout=2", "-p", "2222", "-i", "/k/id", "h1", "true"));
  EXPECT_THAT(SshCommandFromEnvironment("  ssh  -F /x/config "),
              ElementsAre("ssh", "-F", "/x/config"));
  EXPECT_THAT(SshCommandFromEnvironment(nullptr), ElementsAre("ssh"));
  EXPECT_EQ(ShellJoin({"python3", "-c", "print('a b')", "x=1", ""}),
            "python3 -c 'print('\\''a b'\\'')' x=1 ''");
}

TEST(AgentCommandsTest, ARemoteAgentGetsItsEnvironmentOnStdinAndStopsWithIt) {
  TroikarunOptions options;
  options.np = 4;
  options.command = {"python3", "train.py", "--lr", "0.1 0.2"};
  JobLaunch job;
  job.agent = "/opt/troika/troika-agent";
  job.job = "j";
  job.data_interfaces = {"eth0"};
  job.environment = {"PATH=/bin", "PWD=/here", "TROIKA_JOB_TOKEN=old"};
  job.variables = {{"TROIKA_JOB_TOKEN", "secret"}, {"X", "1"}};
  job.working_directory = "/work dir";
  ProcessSpec spec = AgentSpec(options, job, {"h2", true, 1, 2, 2, "10.0.0.1:7000"});
  ASSERT_GE(spec.argv.size(), 2u);
  const std::string remote = spec.argv.back();
  EXPECT_EQ(spec.argv[spec.argv.size() - 2], "h2");
  EXPECT_THAT(remote, HasSubstr("cd '/work dir' 2>/dev/null; exec /opt/troika/troika-agent "
                                "--coordinator=10.0.0.1:7000 --job=j --nnodes=2 "
                                "--nproc-per-node=2 --node_rank=1"));
  EXPECT_THAT(remote, HasSubstr("--host=h2 --data_interface=eth0 --plaintext=true "
                                "--launcher_stdin=true -- python3 train.py --lr '0.1 0.2'"));
  EXPECT_THAT(remote, ::testing::Not(HasSubstr("secret")));  // the token is not on a command line
  ASSERT_TRUE(spec.control_input.has_value());
  const int fd = PipeWith(*spec.control_input);
  EXPECT_THAT(*ReadEnvironmentBlock(fd),
              ElementsAre("PATH=/bin", "TROIKA_JOB_TOKEN=secret", "X=1"));
  close(fd);
  // This machine's agent: no ssh, the variables in its environment.
  ProcessSpec local = AgentSpec(options, job, {"", false, 0, 2, 2, "127.0.0.1:7000"});
  EXPECT_EQ(local.argv.front(), "/opt/troika/troika-agent");
  EXPECT_FALSE(local.control_input.has_value());
  EXPECT_THAT(local.env, ::testing::Contains("TROIKA_JOB_TOKEN=secret"));
}

// A fake ssh: `ssh [options] HOST COMMAND` runs COMMAND here with SSH_CONNECTION set, except
// for host "down" (ssh's exit 255 and message) and "slow" (never answers).
class HostCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/troika-host-check-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    fake_ssh_ = dir_ + "/ssh";
    std::ofstream(fake_ssh_) << R"(#!/bin/sh
while [ $# -gt 2 ]; do shift; done
case "$1" in
  down) echo "ssh: connect to host down port 22: Connection refused" >&2; exit 255 ;;
  slow) exec sleep 30 ;;
esac
SSH_CONNECTION="10.9.9.9 5555 10.9.9.1 22" exec /bin/sh -c "$2"
)";
    chmod(fake_ssh_.c_str(), 0755);
    agent_ = dir_ + "/troika-agent";
    std::ofstream(agent_) << "#!/bin/sh\nprintf 'lo 127.0.0.1 loopback\\neth0 10.9.9.2\\n'\n";
    chmod(agent_.c_str(), 0755);
    ssh_.command = {fake_ssh_};
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string dir_, fake_ssh_, agent_;
  SshOptions ssh_;
  PosixProcessLauncher launcher_;
};

TEST_F(HostCheckTest, HostsThatAnswerTellHowTheyReachTheLauncherAndTheirInterfaces) {
  absl::StatusOr<std::vector<HostProbe>> probes =
      ProbeHosts(launcher_, ssh_, {"a", "b"}, agent_, absl::Seconds(20));
  ASSERT_TRUE(probes.ok()) << probes.status();
  ASSERT_EQ(probes->size(), 2u);
  EXPECT_EQ((*probes)[1].host, "b");
  EXPECT_EQ((*probes)[1].launcher_address, "10.9.9.9");
  EXPECT_THAT((*probes)[1].interfaces, ElementsAre(NetworkInterface{"lo", "127.0.0.1", true},
                                                   NetworkInterface{"eth0", "10.9.9.2", false}));
}

TEST_F(HostCheckTest, EveryFailingHostIsNamedWithWhyAndASilentOneWithinTheTimeout) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<HostProbe>> probes =
      ProbeHosts(launcher_, ssh_, {"a", "down", "slow"}, agent_, absl::Seconds(2));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "the check must not wait past its timeout";
  ASSERT_FALSE(probes.ok());
  EXPECT_THAT(
      probes.status().message(),
      HasSubstr("down: unreachable: ssh: connect to host down port 22: Connection refused"));
  EXPECT_THAT(probes.status().message(), HasSubstr("slow: no answer within the start timeout"));
  EXPECT_THAT(probes.status().message(), ::testing::Not(HasSubstr("a: ")));
  // troika-agent missing on the host.
  probes = ProbeHosts(launcher_, ssh_, {"a"}, dir_ + "/missing-agent", absl::Seconds(20));
  ASSERT_FALSE(probes.ok());
  EXPECT_THAT(probes.status().message(), HasSubstr("missing-agent cannot be run there"));
}

// This machine's hosts alone: no ssh, no probe; agents per host, and --network-interface kept
// for them (and for hosts an elastic job discovers later).
TEST(LayoutTest, ThisMachinesHostsNeedNoSshAndKeepTheNamedInterface) {
  TroikarunOptions options;
  options.np = 4;
  options.hosts = {{"localhost", 2}, {"127.0.0.1", 2}};
  options.network_interfaces = {"lo"};
  PosixProcessLauncher launcher;
  SshOptions ssh;
  ssh.command = {"/no/ssh/here"};  // would fail if it were run
  MemorySink err;
  absl::StatusOr<Layout> layout = PlanAgents(options, launcher, ssh, "/no/agent", err);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_FALSE(layout->remote);
  ASSERT_EQ(layout->agents.size(), 2u);
  EXPECT_EQ(layout->agents[1].host, "127.0.0.1");
  EXPECT_EQ(layout->agents[1].ranks, 2);
  EXPECT_EQ(layout->agents[1].node_rank, 1);
  EXPECT_THAT(layout->launcher_addresses, ElementsAre("127.0.0.1", "127.0.0.1"));
  EXPECT_THAT(layout->data_interfaces, ElementsAre("lo"));
  EXPECT_EQ(AddressWithPort("10.0.0.1", 7), "10.0.0.1:7");
  EXPECT_EQ(AddressWithPort("fe80::1", 7), "[fe80::1]:7");
}

TEST(ChooseInterfacesTest, TheFirstNameEveryHostSharesOrTheOnesAsked) {
  const std::vector<HostProbe> probes = {
      {"a", "", {{"lo", "127.0.0.1", true}, {"eth1", "10.1.0.1"}, {"eth0", "10.0.0.1"}}},
      {"b", "", {{"lo", "127.0.0.1", true}, {"eth0", "10.0.0.2"}, {"eth1", "10.1.0.2"}}},
      {"c", "", {{"eth0", "10.0.0.3"}}}};
  EXPECT_THAT(*ChooseInterfaces(probes, {}), ElementsAre("eth0"));
  EXPECT_THAT(*ChooseInterfaces({probes[0], probes[1]}, {}), ElementsAre("eth1"));
  EXPECT_THAT(*ChooseInterfaces(probes, {"ib0", "eth0"}), ElementsAre("ib0", "eth0"));
  EXPECT_THAT(ChooseInterfaces(probes, {"eth1"}).status().message(),
              HasSubstr("--network-interface eth1 is not up on every host: c has eth0 10.0.0.3"));
  EXPECT_THAT(
      ChooseInterfaces({probes[0], {"d", "", {{"ens3", "10.0.0.4"}}}}, {}).status().message(),
      HasSubstr("share no network interface name"));
}

}  // namespace
}  // namespace troika::agent
