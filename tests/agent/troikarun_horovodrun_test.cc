// horovodrun's flags on troikarun's command line: each works with its meaning (the embedded
// coordinator's, the ranks' environment) or is refused saying why; horovodrun's own tests
// (test/single/test_run.py: test_params_args, test_autotune_args, test_stall_check_args,
// test_library_args, test_logging_args, test_elastic_args) as troikarun's equivalents.

#include <map>
#include <string>
#include <vector>

#include "agent/launcher/troikarun_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

absl::StatusOr<TroikarunOptions> Parse(std::vector<std::string> args) {
  args.insert(args.end(), {"--", "x"});
  return ParseTroikarunArgs(args);
}

std::string ErrorOf(std::vector<std::string> args) {
  auto options = Parse(std::move(args));
  EXPECT_FALSE(options.ok());
  if (options.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  return std::string(options.status().message());
}

TEST(TroikarunHorovodrunTest, ParamsGoToTheCoordinatorAndTheRanks) {
  auto o =
      Parse({"-np", "2", "--fusion-threshold-mb", "10", "--cycle-time-ms", "20", "--cache-capacity",
             "512", "--hierarchical-allreduce", "--hierarchical-allgather"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->fusion_threshold_bytes, int64_t{10} << 20);
  EXPECT_EQ(o->cycle_time, absl::Milliseconds(20));
  EXPECT_EQ(o->cache_capacity, 512);
  EXPECT_THAT(o->rank_env, UnorderedElementsAre(Pair("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),
                                                Pair("HOROVOD_HIERARCHICAL_ALLGATHER", "1")));
  auto off = Parse({"-np", "2", "--no-hierarchical-allreduce", "--no-hierarchical-allgather",
                    "--cache-capacity", "0"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->cache_capacity, 0) << "0: no response cache";
  EXPECT_THAT(off->rank_env, UnorderedElementsAre(Pair("HOROVOD_HIERARCHICAL_ALLREDUCE", "0"),
                                                  Pair("HOROVOD_HIERARCHICAL_ALLGATHER", "0")));
  auto unset = Parse({"-np", "2"});
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->cache_capacity.has_value());
  EXPECT_THAT(unset->rank_env, IsEmpty()) << "nothing set that was not asked for";
  EXPECT_THAT(ErrorOf({"-np", "2", "--cache-capacity", "-1"}),
              HasSubstr("--cache-capacity: '-1' is not a whole number of at least 0"));
}

TEST(TroikarunHorovodrunTest, AutotuneFlags) {
  auto o = Parse({"-np", "2", "--autotune", "--autotune-log-file", "/tmp/autotune.txt",
                  "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "5",
                  "--autotune-bayes-opt-max-samples", "10"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->autotune.enabled);
  EXPECT_EQ(o->autotune.log_file, "/tmp/autotune.txt");
  EXPECT_EQ(o->autotune.warmup_samples, 1);
  EXPECT_EQ(o->autotune.steps_per_sample, 5);
  EXPECT_EQ(o->autotune.max_samples, 10);
  EXPECT_THAT(o->warnings, IsEmpty());
  auto off = Parse({"-np", "2", "--no-autotune"});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->autotune.enabled);
  auto alone = Parse({"-np", "2", "--autotune-warmup-samples", "1"});
  ASSERT_TRUE(alone.ok()) << "horovodrun ignores it";
  EXPECT_THAT(alone->warnings, ElementsAre(HasSubstr("does nothing here: no --autotune")));
  EXPECT_THAT(ErrorOf({"-np", "2", "--autotune-steps-per-sample", "0"}),
              HasSubstr("not a whole number of at least 1"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--autotune-gaussian-process-noise", "0.2"}),
              HasSubstr("fits the noise of its Gaussian process"));
}

TEST(TroikarunHorovodrunTest, StallCheckFlags) {
  auto off = Parse({"-np", "2", "--no-stall-check"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->stall_check.disabled);
  auto times = Parse({"-np", "2", "--stall-check-warning-time-seconds", "10",
                      "--stall-check-shutdown-time-seconds", "20"});
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_FALSE(times->stall_check.disabled);
  EXPECT_EQ(times->stall_check.warning_time, absl::Seconds(10));
  EXPECT_EQ(times->stall_check.shutdown_time, absl::Seconds(20));
  EXPECT_THAT(times->warnings, IsEmpty());
  auto early = Parse({"-np", "2", "--stall-check-shutdown-time-seconds", "30"});
  ASSERT_TRUE(early.ok());
  EXPECT_THAT(early->warnings,
              ElementsAre(HasSubstr("shut down only after a time above the warning time (1m)")));
  EXPECT_THAT(ErrorOf({"-np", "2", "--stall-check-warning-time-seconds", "soon"}),
              HasSubstr("'soon' is not a non-negative number of seconds"));
}

TEST(TroikarunHorovodrunTest, LibraryAndLoggingFlagsBecomeTheRanksVariables) {
  auto o = Parse({"-np", "2", "--gloo-timeout-seconds", "60", "--tcp", "--log-level", "INFO",
                  "--log-with-timestamp"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->rank_env,
              UnorderedElementsAre(Pair("TROIKA_DATA_TIMEOUT", "60"), Pair("NCCL_IB_DISABLE", "1"),
                                   Pair("HOROVOD_LOG_LEVEL", "INFO")));
  EXPECT_EQ(o->log_level, "info") << "troikarun's, its coordinator's and its agents' too";
  auto trace = Parse({"-np", "2", "--log-level", "TRACE"});
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->log_level, "debug");
  EXPECT_EQ(trace->rank_env.at("HOROVOD_LOG_LEVEL"), "TRACE");
  auto fatal = Parse({"-np", "2", "--log_level=fatal"});
  ASSERT_TRUE(fatal.ok());
  EXPECT_EQ(fatal->log_level, "error");
  EXPECT_THAT(ErrorOf({"-np", "2", "--log-level", "LOUD"}), HasSubstr("'LOUD' is not one of"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--gloo-timeout-seconds", "0"}),
              HasSubstr("'0' is not a positive number of seconds"));
}

// Horovod's test_elastic_args: the elastic flags in both of horovodrun's spellings.
TEST(TroikarunHorovodrunTest, ElasticFlagsInHorovodrunsSpellings) {
  auto short_names = Parse({"-np", "4", "--min-np", "2", "--max-np", "8"});
  ASSERT_TRUE(short_names.ok()) << short_names.status();
  EXPECT_EQ(short_names->np, 4);
  EXPECT_EQ(short_names->min_np, 2);
  EXPECT_EQ(short_names->max_np, 8);
  auto o = Parse({"--num-proc", "4", "--min-num-proc", "2", "--max-num-proc", "8",
                  "--slots-per-host", "1", "--elastic-timeout", "60", "--reset-limit", "10",
                  "--blacklist-cooldown-range", "120", "600"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->np, 4);
  EXPECT_EQ(o->min_np, 2);
  EXPECT_EQ(o->max_np, 8);
  EXPECT_EQ(o->slots_per_host, 1);
  EXPECT_EQ(o->attach_timeout, absl::Seconds(60));
  EXPECT_EQ(o->reset_limit, 10);
  EXPECT_EQ(o->blacklist_cooldown_range, std::make_pair(120, 600));
  EXPECT_THAT(o->warnings, ElementsAre(HasSubstr("--slots-per-host does nothing here")))
      << "no --host-discovery-script to give slots to";
}

// Horovod's test_timeline_args: the file works; marking cycles is refused, saying why.
TEST(TroikarunHorovodrunTest, TimelineFilenameAndMarkCycles) {
  auto o = Parse({"-np", "2", "--timeline-filename", "/tmp/timeline.json"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->timeline, "/tmp/timeline.json");
  EXPECT_THAT(
      ErrorOf({"-np", "2", "--timeline-filename", "/tmp/timeline.json", "--timeline-mark-cycles"}),
      HasSubstr("--timeline-mark-cycles is horovodrun's and has no equivalent in "
                "troikarun: Troika's coordinator negotiates as requests arrive"));
}

// Horovod's test_validate_config_args: a negative value of a numeric flag is refused (0 is a
// value where horovodrun's is; troikarun wants at least 1 step per autotune sample and a
// positive Gloo timeout).
TEST(TroikarunHorovodrunTest, NegativeValuesAreRefused) {
  const std::vector<std::string> flags = {"--fusion-threshold-mb",
                                          "--cycle-time-ms",
                                          "--cache-capacity",
                                          "--autotune-warmup-samples",
                                          "--autotune-steps-per-sample",
                                          "--autotune-bayes-opt-max-samples",
                                          "--stall-check-warning-time-seconds",
                                          "--stall-check-shutdown-time-seconds",
                                          "--gloo-timeout-seconds"};
  for (const std::string& flag : flags) {
    EXPECT_THAT(ErrorOf({"-np", "2", flag, "-1"}), HasSubstr(flag + ": '-1' is not a")) << flag;
    const bool positive = flag == "--autotune-steps-per-sample" || flag == "--gloo-timeout-seconds";
    EXPECT_EQ(Parse({"-np", "2", flag, "0"}).ok(), !positive) << flag;
  }
}

TEST(TroikarunHorovodrunTest, FlagsWithoutAnEquivalentAreRefusedSayingWhatToDo) {
  const std::map<std::vector<std::string>, std::string> refused = {
      {{"--mpi"}, "--mpi is horovodrun's and has no equivalent in troikarun: "},
      {{"--jsrun"}, "give the job's hosts with -H or --hostfile"},
      {{"--mpi-args=--map-by ppr:6:node"}, "-x NAME=VALUE"},
      {{"--binding-args", "--rankfile f"}, "numactl or taskset"},
      {{"--mpi-threads-disable"}, "Troika's ranks use no MPI"},
      {{"--num-nccl-streams", "2"}, "one stream per device"},
      {{"--torus-allreduce"}, "NCCL_ALGO"},
      {{"--timeline-mark-cycles"}, "no cycles to mark"},
      {{"--thread-affinity", "1"}, "pin each rank instead"},
      {{"--log-without-timestamp"}, "always carry their time"},
      {{"--log-hide-timestamp"}, "always carry their time"},
      {{"--prefix-output-with-timestamp"}, "ts(1)"},
      {{"-prefix-timestamp"}, "ts(1)"},
  };
  for (const auto& [flags, why] : refused) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_THAT(ErrorOf(args), HasSubstr(why)) << flags[0];
  }
}

TEST(TroikarunHorovodrunTest, FlagsAskingForWhatTroikarunDoesAnywayAreAccepted) {
  auto o = Parse({"-np", "2", "--gloo", "--disable-cache", "--no-torus-allreduce",
                  "--no-mpi-threads-disable", "--no-timeline-mark-cycles", "--log-with-timestamp",
                  "--stall-check"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->rank_env, IsEmpty());
  EXPECT_THAT(o->warnings, IsEmpty());
  EXPECT_FALSE(o->stall_check.disabled);
  EXPECT_TRUE(Parse({"-np", "2", "--no-log-hide-timestamp"}).ok());
}

TEST(TroikarunHorovodrunTest, FlagsHorovodrunsGroupsExcludeAreRefusedTogether) {
  EXPECT_THAT(ErrorOf({"-np", "2", "--autotune", "--no-autotune"}),
              HasSubstr("--autotune and --no-autotune do not go together (nor with horovodrun)"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--no-hierarchical-allreduce", "--hierarchical-allreduce"}),
              HasSubstr("--hierarchical-allreduce and --no-hierarchical-allreduce do not go"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--stall-check", "--no-stall-check"}),
              HasSubstr("do not go together"));
  EXPECT_THAT(ErrorOf({"-np", "2", "--log-with-timestamp", "--no-log-hide-timestamp"}),
              HasSubstr("do not go together"));
  EXPECT_TRUE(Parse({"-np", "2", "--autotune", "--autotune"}).ok()) << "one flag twice is fine";
  EXPECT_TRUE(Parse({"-np", "2", "--hierarchical-allreduce", "--no-hierarchical-allgather"}).ok());
}

TEST(TroikarunHorovodrunTest, TheEmbeddedCoordinatorsFlagsAreRefusedWithACoordinator) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cache-capacity", "0"}, "start that coordinator with --cache_capacity"},
      {{"--autotune"}, "start that coordinator with --autotune"},
      {{"--autotune-log-file", "f"}, "start that coordinator with --autotune"},
      {{"--no-stall-check"}, "--stall_warning_time and --stall_shutdown_time"},
      {{"--stall-check-warning-time-seconds", "5"}, "--stall_warning_time"},
      {{"--timeline-filename", "t.json"}, "troikactl timeline start"},
  };
  for (const auto& [flags, instead] : cases) {
    std::vector<std::string> args = {"-np", "2", "--coordinator", "h:1"};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_THAT(ErrorOf(args), HasSubstr(instead)) << flags[0];
  }
  auto ranks_only = Parse({"-np", "2", "--coordinator", "h:1", "--hierarchical-allreduce"});
  EXPECT_TRUE(ranks_only.ok()) << "the ranks' settings go with any coordinator";
}

TEST(TroikarunHorovodrunTest, CheckBuildAndVersionNeedNoCommand) {
  for (const char* flag : {"-cb", "--check-build"}) {
    auto o = ParseTroikarunArgs({flag});
    ASSERT_TRUE(o.ok()) << flag << ": " << o.status();
    EXPECT_TRUE(o->check_build);
    EXPECT_EQ(o->np, 0) << "-np is not needed";
  }
  auto verbose = ParseTroikarunArgs({"--check-build", "--verbose"});
  ASSERT_TRUE(verbose.ok());
  EXPECT_TRUE(verbose->verbose);
  for (const char* flag : {"-v", "--version"}) {
    auto o = ParseTroikarunArgs({flag});
    ASSERT_TRUE(o.ok()) << flag;
    EXPECT_TRUE(o->version);
  }
  auto bad = ParseTroikarunArgs({"--check-build", "--bogus", "1"});
  EXPECT_FALSE(bad.ok()) << "the other flags are still read";
}

}  // namespace
}  // namespace troika::agent
