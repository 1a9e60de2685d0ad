// horovodrun's --config-file on troikarun: a YAML file of the tunable flags, read from real
// files; flags on the command line win over it, and an unknown key is an error.

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/launcher/config_file.h"
#include "agent/launcher/troikarun_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/temp_file.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Every key troikarun takes with its meaning.
constexpr char kWorkingConfig[] = R"(controller: Gloo
params:
  fusion_threshold_mb: 16
  cycle_time_ms: 2.5
  cache_capacity: 100
  hierarchical_allreduce: yes
  hierarchical_allgather: false
  torus_allreduce: false
autotune:
  enabled: true
  log_file: "tune log.csv"
  warmup_samples: 2
  steps_per_sample: 7
  bayes_opt_max_samples: 12
timeline:
  filename: trace.json
  mark_cycles: false
stall_check:
  warning_time_seconds: 30
  shutdown_time_seconds: 90
library_options:
  mpi_threads_disable: false
  gloo_timeout_seconds: 45
logging:
  level: DEBUG
  with_timestamp: true
)";

absl::StatusOr<TroikarunOptions> ParseWith(const TempFile& file,
                                           std::vector<std::string> args = {"-np", "2"}) {
  args.insert(args.end(), {"--config-file", file.path(), "python3", "train.py"});
  return ParseTroikarunArgs(args);
}

TEST(TroikarunConfigFileTest, EveryKeySetsItsFlag) {
  TempFile file(kWorkingConfig);
  auto o = ParseWith(file);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->fusion_threshold_bytes, int64_t{16} << 20);
  EXPECT_EQ(o->cycle_time, absl::Microseconds(2500));
  EXPECT_EQ(o->cache_capacity, 100);
  EXPECT_TRUE(o->autotune.enabled);
  EXPECT_EQ(o->autotune.log_file, "tune log.csv");
  EXPECT_EQ(o->autotune.warmup_samples, 2);
  EXPECT_EQ(o->autotune.steps_per_sample, 7);
  EXPECT_EQ(o->autotune.max_samples, 12);
  EXPECT_EQ(o->timeline, "trace.json");
  EXPECT_FALSE(o->stall_check.disabled) << "a section without `enabled` keeps the check on";
  EXPECT_EQ(o->stall_check.warning_time, absl::Seconds(30));
  EXPECT_EQ(o->stall_check.shutdown_time, absl::Seconds(90));
  EXPECT_EQ(o->log_level, "debug");
  EXPECT_THAT(o->rank_env, UnorderedElementsAre(Pair("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),
                                                Pair("HOROVOD_HIERARCHICAL_ALLGATHER", "0"),
                                                Pair("TROIKA_DATA_TIMEOUT", "45"),
                                                Pair("HOROVOD_LOG_LEVEL", "DEBUG")));
  EXPECT_EQ(o->config_file, file.path());
  EXPECT_THAT(o->command, ElementsAre("python3", "train.py"));
}

TEST(TroikarunConfigFileTest, FlagsOnTheCommandLineWinWhereverTheyStand) {
  TempFile file(kWorkingConfig);
  auto o = ParseWith(file, {"-np", "2", "--fusion-threshold-mb", "256", "--no-autotune",
                            "--no-hierarchical-allreduce", "--log-level", "ERROR"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->fusion_threshold_bytes, int64_t{256} << 20);
  EXPECT_FALSE(o->autotune.enabled);
  EXPECT_EQ(o->rank_env.at("HOROVOD_HIERARCHICAL_ALLREDUCE"), "0");
  EXPECT_EQ(o->log_level, "error");
  EXPECT_EQ(o->cycle_time, absl::Microseconds(2500)) << "what no flag set comes from the file";
  // After --config-file too: the file is applied once the command line is read.
  std::vector<std::string> args = {
      "-np", "2", "--config-file", file.path(), "--cycle-time-ms", "20", "--", "x"};
  auto after = ParseTroikarunArgs(args);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->cycle_time, absl::Milliseconds(20));
}

TEST(TroikarunConfigFileTest, TheFileWinsOverHorovodsVariables) {
  TempFile file("params:\n  cycle_time_ms: 4\n");
  HorovodEnvironment env;
  env.cycle_time = "9";
  env.fusion_threshold = "1024";
  auto o = ParseTroikarunArgs({"-np", "2", "--config-file", file.path(), "x"}, env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cycle_time, absl::Milliseconds(4));
  EXPECT_EQ(o->fusion_threshold_bytes, 1024);
}

TEST(TroikarunConfigFileTest, SectionsWithoutEnabledAndEmptyValuesAsHorovodrun) {
  TempFile file("autotune:\n  warmup_samples: 1\nstall_check:\nparams:\n  cache_capacity:\n");
  auto o = ParseWith(file, {"-np", "2", "--autotune"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->autotune.enabled) << "the flag wins over the section's implied off";
  EXPECT_FALSE(o->cache_capacity.has_value()) << "a key without a value is skipped";
  auto off = ParseWith(file);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->autotune.enabled);
  TempFile empty("");
  EXPECT_TRUE(ParseWith(empty).ok());
  TempFile disabled("stall_check:\n  enabled: off\n");
  auto no_check = ParseWith(disabled);
  ASSERT_TRUE(no_check.ok()) << no_check.status();
  EXPECT_TRUE(no_check->stall_check.disabled);
}

TEST(TroikarunConfigFileTest, ParseConfigFileListsTheFlagsInTheFilesOrder) {
  auto settings = ParseConfigFile(
      "logging:\n  level: info\ncontroller: gloo\n"
      "timeline:\n  mark_cycles: no\n",
      "c.yaml");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings,
              ElementsAre(ConfigSetting{"logging.level", "log_level", "info"},
                          ConfigSetting{"controller", "gloo", ""},
                          ConfigSetting{"timeline.mark_cycles", "no_timeline_mark_cycles", ""}));
}

TEST(TroikarunConfigFileTest, ErrorsNameTheFileAndTheKey) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"params:\n  fusion_threshold: 32\n",
       "unknown key 'params.fusion_threshold' (params takes fusion_threshold_mb, "},
      {"logging:\n  hide_timestamp: true\n", "unknown key 'logging.hide_timestamp'"},
      {"tuning:\n  x: 1\n", "unknown key 'tuning' (the file takes controller, params, "},
      {"controller: nccl\n", "no such controller 'nccl' (gloo or mpi)"},
      {"controller: mpi\n", "controller: --mpi is horovodrun's and has no equivalent"},
      {"params: 3\n", "params must be a mapping of keys"},
      {"params:\n  cycle_time_ms: [1, 2]\n", "params.cycle_time_ms must be a single value"},
      {"params:\n  hierarchical_allreduce: maybe\n",
       "params.hierarchical_allreduce: 'maybe' is not true or false"},
      {"params:\n  fusion_threshold_mb: -1\n",
       "params.fusion_threshold_mb: --fusion-threshold-mb: '-1' is not a size in MiB"},
      {"library_options:\n  num_nccl_streams: 2\n", "library_options.num_nccl_streams: "},
      {"library_options:\n  thread_affinity: 1\n", "pin each rank instead"},
      {"autotune:\n  gaussian_process_noise: 0.5\n", "autotune.gaussian_process_noise: "},
      {"timeline:\n  mark_cycles: true\n", "no cycles to mark"},
      {"params: {fusion_threshold_mb: 1\n", "line 2, column 1: not YAML"},
      {"- a\n- b\n", "not a mapping of horovodrun's sections"},
  };
  for (const Case& c : cases) {
    TempFile file(c.yaml);
    auto o = ParseWith(file);
    ASSERT_FALSE(o.ok()) << c.yaml;
    EXPECT_TRUE(absl::IsInvalidArgument(o.status()));
    EXPECT_THAT(std::string(o.status().message()),
                HasSubstr(absl::StrCat("--config-file ", file.path(), ": ")))
        << c.yaml;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(c.message)) << c.yaml;
  }
  auto missing = ParseTroikarunArgs({"-np", "2", "--config-file", "/nonexistent.yaml", "x"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("--config-file /nonexistent.yaml: cannot read it"));
}

TEST(TroikarunConfigFileTest, ReadConfigFileOfARealFile) {
  TempFile file("params:\n  cache_capacity: 7\n");
  auto settings = ReadConfigFile(file.path());
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings,
              ElementsAre(ConfigSetting{"params.cache_capacity", "cache_capacity", "7"}));
}

}  // namespace
}  // namespace troika::agent
