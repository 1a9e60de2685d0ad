#include "agent/launcher/troikarun_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<TroikarunOptions> Parse(std::vector<std::string> args) {
  return ParseTroikarunArgs(args);
}

TEST(TroikarunOptionsTest, ParsesEveryFlagAndKeepsTheCommandUntouched) {
  auto options = Parse({"-np", "4", "--coordinator=10.0.0.1:7070", "--job", "j1", "--grace_period",
                        "250ms", "--attach_timeout=3s", "--log_level=info", "--", "./train",
                        "--steps", "5", "--", "-np"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->np, 4);
  EXPECT_EQ(options->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(options->job, "j1");
  EXPECT_EQ(options->grace_period, absl::Milliseconds(250));
  EXPECT_EQ(options->attach_timeout, absl::Seconds(3));
  EXPECT_EQ(options->log_level, "info");
  EXPECT_EQ(options->command, (std::vector<std::string>{"./train", "--steps", "5", "--", "-np"}));
}

TEST(TroikarunOptionsTest, TheCommandMayFollowTheOptionsWithoutDashesAsWithHorovodrun) {
  auto bare = Parse({"-np", "2", "--verbose", "python3", "train.py", "--lr", "0.1", "-np", "8"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->np, 2);
  EXPECT_TRUE(bare->verbose) << "a switch takes no value: python3 begins the command";
  EXPECT_EQ(bare->command,
            (std::vector<std::string>{"python3", "train.py", "--lr", "0.1", "-np", "8"}));
  auto dashes = Parse({"-np", "2", "--", "--not-an-option"});
  ASSERT_TRUE(dashes.ok()) << dashes.status();
  EXPECT_EQ(dashes->command, (std::vector<std::string>{"--not-an-option"}));
  auto unknown = Parse({"-np", "2", "--nope", "python3"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("unknown option 'nope'"));
}

TEST(TroikarunOptionsTest, DefaultsAndAlternativeSpellings) {
  auto options = Parse({"--np=2", "--", "true"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->np, 2);
  EXPECT_TRUE(options->coordinator.empty());
  EXPECT_TRUE(options->job.empty());
  EXPECT_EQ(options->grace_period, absl::Seconds(5));
  EXPECT_EQ(options->attach_timeout, absl::Seconds(60));
  EXPECT_EQ(options->log_level, "warning");
  auto seconds = Parse({"-np=1", "-grace_period=2", "--", "true"});
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_EQ(seconds->grace_period, absl::Seconds(2)) << "a plain number means seconds";
}

TEST(TroikarunOptionsTest, FusionThresholdAndCycleTimeAsHorovodrunSpellsThem) {
  auto options =
      Parse({"-np", "2", "--fusion-threshold-mb", "0.5", "--cycle-time-ms=2.5", "--", "./train"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->fusion_threshold_bytes, int64_t{512} << 10);
  EXPECT_EQ(options->cycle_time, absl::Microseconds(2500));
  auto off = Parse({"-np", "2", "--fusion_threshold_mb=0", "--cycle_time_ms=0", "--", "./train"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->fusion_threshold_bytes, 0) << "0 turns fusion off";
  EXPECT_EQ(off->cycle_time, absl::ZeroDuration());
  auto unset = Parse({"-np", "2", "--", "./train"});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->fusion_threshold_bytes.has_value()) << "the coordinator's default";
  EXPECT_FALSE(unset->cycle_time.has_value());
}

// $HOROVOD_TIMELINE set to `path`, nothing else.
HorovodEnvironment HorovodTimeline(std::string path) {
  HorovodEnvironment env;
  env.timeline = std::move(path);
  return env;
}

TEST(TroikarunOptionsTest, TimelineFromTheFlagOrHorovodTimeline) {
  auto flag = ParseTroikarunArgs({"-np", "2", "--timeline", "t.json", "--", "x"},
                                 HorovodTimeline("env.json"));
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->timeline, "t.json") << "the flag wins over $HOROVOD_TIMELINE";
  auto env = ParseTroikarunArgs({"-np", "2", "--", "x"}, HorovodTimeline("env.json"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->timeline, "env.json");
  auto none = Parse({"-np", "2", "--", "x"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->timeline.empty());
  // horovodrun's HOROVOD_TIMELINE=DYNAMIC (timelines started later from the ranks) is no file.
  auto dynamic = ParseTroikarunArgs({"-np", "2", "--", "x"}, HorovodTimeline("DYNAMIC"));
  ASSERT_TRUE(dynamic.ok()) << dynamic.status();
  EXPECT_TRUE(dynamic->timeline.empty());
  auto remote = ParseTroikarunArgs({"-np", "2", "--coordinator", "h:1", "--", "x"},
                                   HorovodTimeline("env.json"));
  ASSERT_FALSE(remote.ok());
  EXPECT_THAT(std::string(remote.status().message()), HasSubstr("troikactl timeline start"));
}

TEST(TroikarunOptionsTest, HorovodFusionThresholdAndCycleTimeAreDefaults) {
  HorovodEnvironment env{"", "1048576", "3.5"};
  auto from_env = ParseTroikarunArgs({"-np", "2", "--", "x"}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->fusion_threshold_bytes, int64_t{1} << 20) << "bytes, as Horovod's";
  EXPECT_EQ(from_env->cycle_time, absl::Microseconds(3500));
  auto flags = ParseTroikarunArgs(
      {"-np", "2", "--fusion-threshold-mb", "2", "--cycle-time-ms", "0", "--", "x"}, env);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->fusion_threshold_bytes, int64_t{2} << 20) << "the flags win";
  EXPECT_EQ(flags->cycle_time, absl::ZeroDuration());
  auto bad = ParseTroikarunArgs({"-np", "2", "--", "x"}, {"", "64MB", ""});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("$HOROVOD_FUSION_THRESHOLD: '64MB' is not a size in bytes"));
  auto remote = ParseTroikarunArgs({"-np", "2", "--coordinator", "h:1", "--", "x"}, {"", "", "2"});
  ASSERT_FALSE(remote.ok());
  EXPECT_THAT(std::string(remote.status().message()), HasSubstr("$HOROVOD_CYCLE_TIME"));
}

TEST(TroikarunOptionsTest, SchedulesOnOrOffForTheEmbeddedCoordinatorOnly) {
  auto unset = Parse({"-np", "2", "--", "x"});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->schedules.has_value()) << "unset: the embedded coordinator's default, on";
  auto on = Parse({"-np", "2", "--schedules", "on", "--", "x"});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->schedules, true);
  auto off = Parse({"-np", "2", "--schedules", "off", "--", "x"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->schedules, false);
  auto bad = Parse({"-np", "2", "--schedules", "yes", "--", "x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'yes' is not on or off"));
  for (const char* value : {"--schedules=on", "--schedules=off"}) {
    auto remote = Parse({"-np", "2", "--coordinator", "h:1", value, "--", "x"});
    ASSERT_FALSE(remote.ok()) << value;
    EXPECT_THAT(std::string(remote.status().message()),
                HasSubstr("start that coordinator with --schedules=true or false"));
  }
  EXPECT_TRUE(Parse({"-np", "2", "--coordinator", "h:1", "--", "x"}).ok());
}

TEST(TroikarunOptionsTest, MinNpMakesAnElasticJobAndMaxNpLetsItGrow) {
  auto unset = Parse({"-np", "4", "--", "x"});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->min_np, 0) << "not elastic";
  auto elastic = Parse({"-np", "4", "--min-np", "2", "--", "x"});
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->min_np, 2);
  auto above = Parse({"-np", "4", "--min-np=5", "--", "x"});
  ASSERT_FALSE(above.ok());
  EXPECT_THAT(std::string(above.status().message()), HasSubstr("--min-np 5 is above -np 4"));
  EXPECT_THAT(std::string(kTroikarunUsage), HasSubstr("--min-np M"));
  auto growing = Parse({"-np", "2", "--min-np", "2", "--max-np", "4", "--", "x"});
  ASSERT_TRUE(growing.ok()) << growing.status();
  EXPECT_EQ(growing->max_np, 4);
  auto alone = Parse({"-np", "2", "--max-np", "4", "--", "x"});
  ASSERT_FALSE(alone.ok());
  EXPECT_THAT(std::string(alone.status().message()), HasSubstr("--max-np needs --min-np"));
  auto below = Parse({"-np", "4", "--min-np", "2", "--max-np", "3", "--", "x"});
  ASSERT_FALSE(below.ok());
  EXPECT_THAT(std::string(below.status().message()), HasSubstr("--max-np 3 is below -np 4"));
  auto restarts = Parse({"-np", "2", "--min-np", "1", "--max-restarts", "2", "--", "x"});
  ASSERT_TRUE(restarts.ok()) << restarts.status();
  EXPECT_EQ(restarts->max_restarts, 2);
  auto not_elastic = Parse({"-np", "2", "--max-restarts", "2", "--", "x"});
  ASSERT_FALSE(not_elastic.ok());
  EXPECT_THAT(std::string(not_elastic.status().message()),
              HasSubstr("--max-restarts needs --min-np"));
}

// The embedded coordinator's TLS: certificate, key and the agents' CA together; a client CA
// for mutual TLS; none of them with a coordinator of one's own.
TEST(TroikarunOptionsTest, TlsFlagsGoTogetherAndOnlyForTheEmbeddedCoordinator) {
  auto tls = ParseTroikarunArgs({"-np", "2", "--tls-cert", "s.crt", "--tls-key", "s.key",
                                 "--tls-ca", "ca.crt", "--tls-client-ca", "cca.crt", "--", "x"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->tls_cert, "s.crt");
  EXPECT_EQ(tls->tls_key, "s.key");
  EXPECT_EQ(tls->tls_ca, "ca.crt");
  EXPECT_EQ(tls->tls_client_ca, "cca.crt");
  EXPECT_THAT(
      ParseTroikarunArgs({"-np", "2", "--tls-cert", "s.crt", "--tls-key", "s.key", "--", "x"})
          .status()
          .message(),
      HasSubstr("needs --tls-cert, --tls-key and --tls-ca"));
  EXPECT_THAT(
      ParseTroikarunArgs({"-np", "2", "--tls-client-ca", "c.crt", "--", "x"}).status().message(),
      HasSubstr("needs --tls-cert, --tls-key and --tls-ca"));
  EXPECT_THAT(ParseTroikarunArgs({"-np", "2", "--coordinator", "h:7070", "--tls-cert", "s.crt",
                                  "--tls-key", "s.key", "--tls-ca", "ca.crt", "--", "x"})
                  .status()
                  .message(),
              HasSubstr("with --coordinator, its agents reach it as TROIKA_TLS_CA"));
}

// Discovery drains hosts through the embedded coordinator: not with one of one's own.
TEST(TroikarunOptionsTest, HostDiscoveryNeedsTheEmbeddedCoordinator) {
  EXPECT_THAT(ParseTroikarunArgs({"-np", "2", "--coordinator", "h:7070", "--host-discovery-script",
                                  "./discover.sh", "--", "x"})
                  .status()
                  .message(),
              HasSubstr("--host-discovery-script drains hosts through troikarun's embedded "
                        "coordinator"));
}

TEST(TroikarunOptionsTest, HelpNeedsNothingElse) {
  for (const char* flag : {"--help", "-h", "-help"}) {
    auto options = Parse({flag});
    ASSERT_TRUE(options.ok()) << flag;
    EXPECT_TRUE(options->help);
  }
}

TEST(TroikarunOptionsTest, UsageErrorsNameTheProblem) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"-np", "2"}, "no command: troikarun [options] COMMAND"},
      {{"-np", "2", "--"}, "no command: troikarun [options] COMMAND"},
      {{"--", "./train"}, "-np N is required"},
      {{"-np", "0", "--", "x"}, "-np must be between 1 and 1024, got 0"},
      {{"-np", "-3", "--", "x"}, "got -3"},
      {{"-np", "two", "--", "x"}, "'two' is not a number"},
      {{"-np", "--", "x"}, "'-np' needs a value"},
      {{"-np", "2", "--grace_period", "soon", "--", "x"}, "not a duration"},
      {{"-np", "2", "--grace_period", "-1s", "--", "x"}, ">= 0"},
      {{"-np", "2", "--attach_timeout", "0", "--", "x"}, "--attach_timeout must be finite and > 0"},
      {{"-np", "2", "--coordinator", "nohostport", "--", "x"},
       "--coordinator: coordinator address 'nohostport' is invalid: no port"},
      {{"-np", "2", "--coordinator", "127.0.0.1:", "--", "x"}, "'127.0.0.1:' is invalid: no port"},
      {{"-np", "2", "--coordinator", ":7070", "--", "x"}, "':7070' is invalid: empty host"},
      {{"-np", "2", "--coordinator", "h:99999", "--", "x"}, "port 99999 is out of range"},
      {{"-np", "2", "--coordinator", "[::1", "--", "x"}, "'[' without a closing ']'"},
      {{"-np", "2", "--bogus", "1", "--", "x"}, "unknown option 'bogus'"},
      {{"-np", "2", "--fusion-threshold-mb", "-1", "--", "x"}, "not a size in MiB"},
      {{"-np", "2", "--fusion-threshold-mb", "2000000", "--", "x"}, "between 0 and 1 TiB"},
      {{"-np", "2", "--fusion-threshold-mb", "lots", "--", "x"}, "'lots' is not a size in MiB"},
      {{"-np", "2", "--cycle-time-ms", "nan", "--", "x"}, "'nan' is not a time in ms"},
      {{"-np", "2", "--cycle-time-ms", "1e9", "--", "x"}, "between 0 and 60000"},
      {{"-np", "2", "--timeline=", "--", "x"}, "--timeline needs a file"},
      {{"-np", "2", "--coordinator", "h:1", "--cycle-time-ms", "2", "--", "x"},
       "with --coordinator, give them to that coordinator"},
  };
  for (const Case& c : cases) {
    auto options = Parse(c.args);
    ASSERT_FALSE(options.ok()) << c.message;
    EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
    EXPECT_THAT(std::string(options.status().message()), HasSubstr(c.message));
  }
}

TEST(TroikarunOptionsTest, MergeEnvironmentOverridesInheritedValues) {
  std::vector<std::string> env = MergeEnvironment(
      {"PATH=/bin", "TROIKA_RANK=7", "EMPTY=", "NOEQUALS"}, {{"TROIKA_RANK", "0"}, {"A", "b=c"}});
  EXPECT_THAT(env, ::testing::UnorderedElementsAre("PATH=/bin", "EMPTY=", "NOEQUALS",
                                                   "TROIKA_RANK=0", "A=b=c"));
}

}  // namespace
}  // namespace troika::agent
