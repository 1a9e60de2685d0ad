// troikarun's embedded coordinator gets horovodrun's flags: the options it is started with.

#include "agent/launcher/embedded_coordinator.h"

#include <map>
#include <string>
#include <vector>

#include "agent/launcher/troikarun_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

TroikarunOptions Parsed(std::vector<std::string> args) {
  args.insert(args.begin(), {"-np", "2"});
  args.insert(args.end(), {"--", "x"});
  absl::StatusOr<TroikarunOptions> options = ParseTroikarunArgs(args);
  EXPECT_TRUE(options.ok()) << options.status();
  return options.ok() ? *options : TroikarunOptions{};
}

TEST(EmbeddedCoordinatorTest, WithoutFlagsTheCoordinatorsDefaultsAndSchedulesOn) {
  const coordinator::CoordinatorOptions defaults;
  coordinator::CoordinatorOptions o = EmbeddedCoordinatorOptions(Parsed({}), "127.0.0.1:0");
  EXPECT_EQ(o.listen_address, "127.0.0.1:0");
  EXPECT_TRUE(o.tls.plaintext);
  const coordinator::JobOptions& job = o.registry.job;
  EXPECT_EQ(job.negotiator.fusion_threshold_bytes,
            defaults.registry.job.negotiator.fusion_threshold_bytes);
  EXPECT_EQ(job.negotiator.cycle_time, defaults.registry.job.negotiator.cycle_time);
  EXPECT_EQ(job.negotiator.cache_capacity, 1024);
  EXPECT_TRUE(job.schedules) << "troikarun's default, unlike the bare JobOptions'";
  EXPECT_EQ(job.stall.warning_time, absl::Seconds(60));
  EXPECT_EQ(job.stall.shutdown_time, absl::ZeroDuration());
  EXPECT_FALSE(job.autotune.has_value());
  EXPECT_EQ(EmbeddedCoordinatorOptions(Parsed({}), "0.0.0.0:0").listen_address, "0.0.0.0:0");
}

TEST(EmbeddedCoordinatorTest, NegotiationFlagsAndTheCache) {
  coordinator::CoordinatorOptions o =
      EmbeddedCoordinatorOptions(Parsed({"--fusion-threshold-mb", "8", "--cycle-time-ms", "3",
                                         "--cache-capacity", "0", "--schedules", "off"}),
                                 "127.0.0.1:0");
  const coordinator::JobOptions& job = o.registry.job;
  EXPECT_EQ(job.negotiator.fusion_threshold_bytes, int64_t{8} << 20);
  EXPECT_EQ(job.negotiator.cycle_time, absl::Milliseconds(3));
  EXPECT_EQ(job.negotiator.cache_capacity, 0);
  EXPECT_FALSE(job.schedules);
}

TEST(EmbeddedCoordinatorTest, AutotuneTunesWhatWasNotGiven) {
  coordinator::CoordinatorOptions o = EmbeddedCoordinatorOptions(
      Parsed({"--autotune", "--autotune-log-file", "/tmp/tune.csv", "--autotune-warmup-samples",
              "1", "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "9"}),
      "127.0.0.1:0");
  ASSERT_TRUE(o.registry.job.autotune.has_value());
  const coordinator::AutotuneConfig& tune = *o.registry.job.autotune;
  const coordinator::AutotuneOptions defaults;
  EXPECT_EQ(tune.options.warmup_samples, 1);
  EXPECT_EQ(tune.options.steps_per_sample, 5);
  EXPECT_EQ(tune.options.max_samples, 9);
  EXPECT_EQ(tune.csv_path, "/tmp/tune.csv");
  EXPECT_EQ(tune.options.min_fusion_bytes, defaults.min_fusion_bytes) << "both axes tuned";
  EXPECT_EQ(tune.options.max_cycle_time, defaults.max_cycle_time);
  // As horovodrun: a parameter given (flag, or $HOROVOD_CYCLE_TIME) is held during tuning.
  HorovodEnvironment env;
  env.cycle_time = "2";
  auto fixed = ParseTroikarunArgs({"-np", "2", "--autotune", "--", "x"}, env);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  const coordinator::AutotuneOptions held =
      EmbeddedCoordinatorOptions(*fixed, "127.0.0.1:0").registry.job.autotune->options;
  EXPECT_EQ(held.min_cycle_time, absl::Milliseconds(2));
  EXPECT_EQ(held.max_cycle_time, absl::Milliseconds(2));
  EXPECT_EQ(held.min_fusion_bytes, defaults.min_fusion_bytes);
  EXPECT_EQ(held.max_fusion_bytes, defaults.max_fusion_bytes);
  const coordinator::AutotuneOptions fusion_held =
      EmbeddedCoordinatorOptions(Parsed({"--autotune", "--fusion-threshold-mb", "4"}),
                                 "127.0.0.1:0")
          .registry.job.autotune->options;
  EXPECT_EQ(fusion_held.min_fusion_bytes, int64_t{4} << 20);
  EXPECT_EQ(fusion_held.max_fusion_bytes, int64_t{4} << 20);
  EXPECT_EQ(fusion_held.min_cycle_time, defaults.min_cycle_time);
}

// Horovod's test_autotuning_with_fixed_param: with --autotune, the fusion threshold and the
// cycle time not given are tuned, the cache capacity given is kept, and of the hierarchical
// switches only the one given reaches the ranks.
TEST(EmbeddedCoordinatorTest, AutotuneWithTheCacheAndOneHierarchicalSwitchGiven) {
  const TroikarunOptions options =
      Parsed({"--autotune", "--cache-capacity", "1024", "--no-hierarchical-allgather"});
  EXPECT_FALSE(options.fusion_threshold_bytes.has_value());
  EXPECT_FALSE(options.cycle_time.has_value());
  EXPECT_EQ(options.rank_env,
            (std::map<std::string, std::string>{{"HOROVOD_HIERARCHICAL_ALLGATHER", "0"}}));
  const coordinator::JobOptions job =
      EmbeddedCoordinatorOptions(options, "127.0.0.1:0").registry.job;
  EXPECT_EQ(job.negotiator.cache_capacity, 1024);
  ASSERT_TRUE(job.autotune.has_value());
  const coordinator::AutotuneOptions defaults;
  EXPECT_EQ(job.autotune->options.min_fusion_bytes, defaults.min_fusion_bytes);
  EXPECT_EQ(job.autotune->options.max_fusion_bytes, defaults.max_fusion_bytes);
  EXPECT_EQ(job.autotune->options.min_cycle_time, defaults.min_cycle_time);
  EXPECT_EQ(job.autotune->options.max_cycle_time, defaults.max_cycle_time);
}

TEST(EmbeddedCoordinatorTest, StallCheckAsHorovodrun) {
  auto stall = [](std::vector<std::string> flags) {
    return EmbeddedCoordinatorOptions(Parsed(std::move(flags)), "127.0.0.1:0").registry.job.stall;
  };
  coordinator::StallOptions off =
      stall({"--no-stall-check", "--stall-check-shutdown-time-seconds", "600"});
  EXPECT_EQ(off.warning_time, absl::ZeroDuration()) << "no warnings";
  EXPECT_EQ(off.shutdown_time, absl::ZeroDuration()) << "and no shutdown";
  coordinator::StallOptions times = stall(
      {"--stall-check-warning-time-seconds", "10", "--stall-check-shutdown-time-seconds", "20"});
  EXPECT_EQ(times.warning_time, absl::Seconds(10));
  EXPECT_EQ(times.shutdown_time, absl::Seconds(20));
  coordinator::StallOptions early = stall({"--stall-check-shutdown-time-seconds", "30"});
  EXPECT_EQ(early.warning_time, absl::Seconds(60));
  EXPECT_EQ(early.shutdown_time, absl::ZeroDuration())
      << "horovodrun shuts down only after a time above the warning time";
}

}  // namespace
}  // namespace troika::agent
