// troikarun's flags for a job across hosts, as horovodrun's: -H, --hostfile, ssh, -x, the
// interfaces, --output-filename and the elastic hosts' flags, checked against each other.

#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "agent/launcher/troikarun_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/temp_file.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::StatusOr<TroikarunOptions> Parse(std::vector<std::string> args,
                                       const HorovodEnvironment& env = {}) {
  args.insert(args.end(), {"--", "x"});
  return ParseTroikarunArgs(args, env);
}

std::string ErrorOf(std::vector<std::string> args, const HorovodEnvironment& env = {}) {
  auto options = Parse(std::move(args), env);
  EXPECT_FALSE(options.ok());
  if (options.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  return std::string(options.status().message());
}

TEST(TroikarunHostsOptionsTest, HostsFromTheListOrTheHostfile) {
  auto list = Parse({"-np", "3", "-H", "server1:2,server2"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(list->hosts, ElementsAre(HostSlots{"server1", 2}, HostSlots{"server2", 1}));
  auto spelled = Parse({"-np", "2", "--hosts=a:1,b:1"});
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  EXPECT_EQ(spelled->hosts.size(), 2u);
  TempFile file("# two hosts\n172.31.32.7 slots=8\n172.31.33.9 slots=8\n");
  for (const char* flag : {"--hostfile", "-hostfile"}) {
    auto from_file = Parse({"-np", "16", flag, file.path()});
    ASSERT_TRUE(from_file.ok()) << flag << ": " << from_file.status();
    EXPECT_THAT(from_file->hosts,
                ElementsAre(HostSlots{"172.31.32.7", 8}, HostSlots{"172.31.33.9", 8}));
  }
  EXPECT_THAT(ErrorOf({"-np", "2", "--hostfile", "/nonexistent/hosts"}),
              HasSubstr("--hostfile /nonexistent/hosts: cannot read it"));
}

TEST(TroikarunHostsOptionsTest, HostsCheckedAgainstTheOtherFlags) {
  TempFile file("a slots=2\n");
  EXPECT_THAT(ErrorOf({"-np", "2", "-H", "a:2", "--hostfile", file.path()}),
              HasSubstr("-H and --hostfile each give the job's hosts: give one of them"));
  EXPECT_THAT(ErrorOf({"-np", "2", "-H", "a:2", "--host-discovery-script", "./d.sh"}),
              HasSubstr("-H and --host-discovery-script each give the job's hosts"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--hostfile", file.path(), "--host-discovery-script", "d"}),
              HasSubstr("--hostfile and --host-discovery-script"));
  EXPECT_THAT(ErrorOf({"-np", "4", "--nproc-per-node", "2", "-H", "a:2,b:2"}),
              HasSubstr("--nproc-per-node does not go with -H: each host runs as many ranks as "
                        "its slots"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--nproc-per-node", "2", "--host-discovery-script", "d"}),
              HasSubstr("--nproc-per-node does not go with --host-discovery-script"));
  EXPECT_THAT(ErrorOf({"-np", "5", "-H", "a:2,b:2"}),
              HasSubstr("-np 5 is more than the 4 slots of -H's hosts"));
  EXPECT_TRUE(Parse({"-np", "3", "-H", "a:2,b:2"}).ok()) << "fewer ranks than slots is fine";
  EXPECT_TRUE(Parse({"-np", "4", "-H", "a:2,b:2", "--coordinator", "h:1"}).ok());
}

TEST(TroikarunHostsOptionsTest, DiscoveryScriptMakesAnElasticJobAsHorovodrun) {
  auto o = Parse({"-np", "4", "--host-discovery-script", "./discover.sh", "--slots-per-host", "2",
                  "--reset-limit", "3", "--blacklist-cooldown-range", "60", "300"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host_discovery_script, "./discover.sh");
  EXPECT_EQ(o->min_np, 4) << "horovodrun: --min-np defaults to -np";
  EXPECT_EQ(o->max_np, kMaxRanks) << "horovodrun: unbounded";
  EXPECT_EQ(o->slots_per_host, 2);
  EXPECT_EQ(o->reset_limit, 3);
  EXPECT_EQ(o->blacklist_cooldown_range, std::make_pair(60, 300));
  EXPECT_THAT(o->warnings, IsEmpty());
  auto bounded =
      Parse({"-np", "4", "--min-np", "2", "--max-np", "8", "--host-discovery-script", "d"});
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_EQ(bounded->min_np, 2);
  EXPECT_EQ(bounded->max_np, 8);
  auto unset = Parse({"-np", "2"});
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->reset_limit, -1) << "no limit";
  EXPECT_FALSE(unset->blacklist_cooldown_range.has_value()) << "failing hosts out for good";
  auto zero = Parse({"-np", "2", "--min-np", "1", "--reset-limit", "0"});
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->reset_limit, 0) << "horovodrun's 0: no reset at all";
}

TEST(TroikarunHostsOptionsTest, CooldownRangeTakesTwoValuesWithinHorovodrunsBounds) {
  const std::vector<std::string> elastic = {"-np", "2", "--min-np", "1"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = elastic;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  EXPECT_THAT(ErrorOf(with({"--blacklist-cooldown-range", "60"})), HasSubstr("needs two values"));
  EXPECT_THAT(ErrorOf(with({"--blacklist-cooldown-range", "0", "10"})),
              HasSubstr("want 1 <= MIN <= MAX <= 3600 seconds"));
  EXPECT_THAT(ErrorOf(with({"--blacklist-cooldown-range", "10", "3601"})),
              HasSubstr("1 <= MIN <= MAX <= 3600"));
  EXPECT_THAT(ErrorOf(with({"--blacklist-cooldown-range", "300", "60"})),
              HasSubstr("--blacklist-cooldown-range 300 60: want 1 <= MIN <= MAX"));
  EXPECT_THAT(ErrorOf(with({"--blacklist-cooldown-range", "a", "b"})),
              HasSubstr("'a b' is not two numbers of seconds"));
  auto o = Parse(with({"--blacklist-cooldown-range", "1", "3600"}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->blacklist_cooldown_range, std::make_pair(1, 3600));
}

TEST(TroikarunHostsOptionsTest, SshStartTimeoutInterfacesAndOutput) {
  auto o = Parse({"-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", "/keys/id", "--start-timeout",
                  "45", "--network-interfaces", "eth0,eth1", "--network-interface", "eth0",
                  "--network-interface", "ib0", "--output-filename", "out", "--verbose"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ssh_port, 2222);
  EXPECT_EQ(o->ssh_identity_file, "/keys/id");
  EXPECT_EQ(o->start_timeout, absl::Seconds(45));
  EXPECT_THAT(o->network_interfaces, ElementsAre("eth0", "eth1", "ib0")) << "their union";
  EXPECT_EQ(o->output_filename, "out");
  EXPECT_TRUE(o->verbose);
  EXPECT_THAT(o->warnings, IsEmpty());
  auto spelled = Parse({"-np", "2", "-H", "a:2", "--ssh-port=22", "--ssh-identity-file=k"});
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  EXPECT_EQ(spelled->ssh_port, 22);
  EXPECT_EQ(spelled->ssh_identity_file, "k");
  EXPECT_THAT(ErrorOf({"-np", "2", "-p", "0"}), HasSubstr("'0' is not a whole number from 1"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--start-timeout", "0"}),
              HasSubstr("--start-timeout: '0' is not a positive number of seconds"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--network-interfaces", "eth0,,eth1"}),
              HasSubstr("not a comma-separated list"));
}

TEST(TroikarunHostsOptionsTest, StartTimeoutDefaultsToHorovodStartTimeout) {
  HorovodEnvironment env;
  env.start_timeout = "90";
  auto from_env = Parse({"-np", "2", "-H", "a:2"}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->start_timeout, absl::Seconds(90));
  auto flag = Parse({"-np", "2", "-H", "a:2", "--start-timeout", "10"}, env);
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->start_timeout, absl::Seconds(10)) << "the flag wins";
  auto unset = Parse({"-np", "2"});
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->start_timeout, absl::Seconds(30));
  env.start_timeout = "soon";
  EXPECT_THAT(ErrorOf({"-np", "2"}, env), HasSubstr("$HOROVOD_START_TIMEOUT: 'soon'"));
}

TEST(TroikarunHostsOptionsTest, ElasticTimeoutIsTheAttachTimeout) {
  auto flag = Parse({"-np", "2", "--elastic-timeout", "600"});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->attach_timeout, absl::Seconds(600));
  HorovodEnvironment env;
  env.elastic_timeout = "300";
  auto elastic = Parse({"-np", "2", "--min-np", "1"}, env);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->attach_timeout, absl::Seconds(300));
  auto fixed = Parse({"-np", "2"}, env);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->attach_timeout, absl::Seconds(60)) << "$HOROVOD_ELASTIC_TIMEOUT: elastic only";
  auto given = Parse({"-np", "2", "--min-np", "1", "--attach_timeout", "5s"}, env);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->attach_timeout, absl::Seconds(5)) << "a flag wins over the variable";
}

TEST(TroikarunHostsOptionsTest, ExtraVariablesTakeAValueOrTroikarunsOwn) {
  HorovodEnvironment env;
  env.getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "LD_LIBRARY_PATH") return "/opt/lib";
    return std::nullopt;
  };
  auto o = Parse({"-np", "2", "-x", "NCCL_DEBUG=INFO", "-x", "LD_LIBRARY_PATH", "-x",
                  "EMPTY=", "-x", "A=b=c", "-x", "UNSET_HERE"},
                 env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->extra_env,
              ElementsAre("NCCL_DEBUG=INFO", "LD_LIBRARY_PATH=/opt/lib", "EMPTY=", "A=b=c"));
  EXPECT_THAT(o->warnings, ElementsAre("-x UNSET_HERE: UNSET_HERE is not set here; the ranks do "
                                       "not get it"));
  for (const char* bad : {"=v", "1X=v", "A-B=v", ""}) {
    EXPECT_THAT(ErrorOf({"-np", "2", "-x", bad}), HasSubstr("is not NAME or NAME=VALUE")) << bad;
  }
}

TEST(TroikarunHostsOptionsTest, FlagsThatDoNothingHereAreWarnedAbout) {
  auto local = Parse({"-np", "2", "-p", "22", "-i", "k", "--start-timeout", "5",
                      "--network-interface", "eth0", "--slots-per-host", "2", "--reset-limit", "1",
                      "--blacklist-cooldown-range", "1", "2"});
  ASSERT_TRUE(local.ok()) << local.status() << " (horovodrun ignores them)";
  std::string all;
  for (const std::string& warning : local->warnings) all += warning + "\n";
  EXPECT_EQ(local->warnings.size(), 7u) << all;
  EXPECT_THAT(all, HasSubstr("-p/--ssh-port does nothing here: no -H, --hostfile or "
                             "--host-discovery-script"));
  EXPECT_THAT(all, HasSubstr("--slots-per-host does nothing here"));
  EXPECT_THAT(all, HasSubstr("--reset-limit does nothing here: not an elastic job"));
  EXPECT_THAT(all, HasSubstr("--blacklist-cooldown-range does nothing here"));
}

}  // namespace
}  // namespace troika::agent
