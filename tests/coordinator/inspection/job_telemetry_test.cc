#include "coordinator/inspection/job_telemetry.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

std::vector<ReadyRecord> Ready(std::vector<std::string> names, absl::Time at) {
  std::vector<ReadyRecord> out;
  for (std::string& name : names) {
    out.push_back({std::move(name), CollectiveType::kAllreduce, at, {at, at}, true});
  }
  return out;
}

ExecReport Report(int rank, absl::Time sent_at, int64_t bytes) {
  ExecReport r;
  r.rank = rank;
  r.sent_at = sent_at;
  r.allreduce_bytes = bytes;
  return r;
}

AutotuneConfig Tune(int max_samples) {
  AutotuneConfig config;
  config.options.warmup_samples = 0;
  config.options.steps_per_sample = 2;
  config.options.max_samples = max_samples;
  return config;
}

TEST(JobTelemetryTest, RanksReportOnlyWhileTuningOrWritingATimeline) {
  JobTelemetry idle("job", 2, std::nullopt, {});
  EXPECT_EQ(idle.settings(), ClientSettings{});
  const std::string path = ::testing::TempDir() + "/telemetry_settings.json";
  ASSERT_TRUE(idle.StartTimeline(path, 1 << 20, kT0).ok());
  EXPECT_EQ(idle.settings().report_interval_ms, JobTelemetry::kReportIntervalMs);
  EXPECT_TRUE(idle.settings().report_phases);
  EXPECT_THAT(idle.StartTimeline(path, 1 << 20, kT0).message(), HasSubstr("already"));
  ASSERT_TRUE(idle.StopTimeline().ok());
  EXPECT_EQ(idle.settings(), ClientSettings{});
  EXPECT_FALSE(idle.StopTimeline().ok());

  JobTelemetry tuned("job", 2, Tune(1), {});
  EXPECT_EQ(tuned.settings().report_interval_ms, JobTelemetry::kReportIntervalMs);
  EXPECT_FALSE(tuned.settings().report_phases);
}

TEST(JobTelemetryTest, SettingsForSendTheNegotiatorsCycleTimeClamped) {
  JobTelemetry tuned("job", 2, Tune(1), {});
  NegotiatorOptions negotiation;
  negotiation.cycle_time = absl::Milliseconds(5);
  ClientSettings settings = tuned.SettingsFor(negotiation);
  EXPECT_EQ(settings.send_cycle_us, 5000);
  EXPECT_EQ(settings.report_interval_ms, JobTelemetry::kReportIntervalMs);
  negotiation.cycle_time = absl::Hours(1);
  EXPECT_EQ(tuned.SettingsFor(negotiation).send_cycle_us, 60'000'000);
  negotiation.cycle_time = -absl::Seconds(1);
  EXPECT_EQ(tuned.SettingsFor(negotiation).send_cycle_us, 0);
}

TEST(JobTelemetryTest, SampleEndsAfterItsStepsOnceEveryRankReportedAndScoresTheMeanRate) {
  JobTelemetry t("job", 2, Tune(1), {});
  t.OnReport(Report(0, kT0, 0), kT0);
  t.OnReport(Report(1, kT0 - absl::Seconds(5), 0), kT0);
  // Two steps: a step ends when a name comes back.
  EXPECT_FALSE(t.OnReady(Ready({"a", "b"}, kT0), kT0));
  EXPECT_FALSE(t.OnReady(Ready({"a", "b"}, kT0), kT0));
  EXPECT_FALSE(t.OnReady(Ready({"a"}, kT0), kT0));  // second step done; no report since
  // Rank 0: 1000 B in 1 s; rank 1: 3000 B in 1 s (its own clock runs 5 s behind).
  t.OnReport(Report(0, kT0 + absl::Seconds(1), 1000), kT0 + absl::Seconds(1));
  EXPECT_FALSE(t.OnReady(Ready({"b"}, kT0), kT0));  // rank 1 has not reported yet
  t.OnReport(Report(1, kT0 - absl::Seconds(4), 3000), kT0 + absl::Seconds(1));
  std::optional<TuningParams> tuned = t.OnReady(Ready({"a"}, kT0), kT0);
  ASSERT_TRUE(tuned.has_value());
  const AutotuneInfo info = t.autotune_info();
  EXPECT_TRUE(info.done);
  EXPECT_EQ(info.evaluations, 1);
  EXPECT_DOUBLE_EQ(info.best_score, 2000.0);
  EXPECT_EQ(*tuned, info.best);
  EXPECT_EQ(t.settings(), ClientSettings{});  // done: no more reports needed
}

TEST(JobTelemetryTest, AsANegotiationObserverItTunesOnSetZeroAloneAndHandsTheParametersOn) {
  std::vector<TuningParams> handed;
  JobTelemetry t("job", 2, Tune(1), {}, [&](const TuningParams& p) { handed.push_back(p); });
  NegotiationObserver& observer = t;
  t.OnReport(Report(0, kT0, 0), kT0);
  t.OnReport(Report(1, kT0, 0), kT0);
  // Another process set's tensors are no steps of the job.
  for (int i = 0; i < 4; ++i) observer.OnReady(1, Ready({"a", "b"}, kT0), kT0);
  t.OnReport(Report(0, kT0 + absl::Seconds(1), 1000), kT0 + absl::Seconds(1));
  t.OnReport(Report(1, kT0 + absl::Seconds(1), 3000), kT0 + absl::Seconds(1));
  observer.OnReady(1, Ready({"a", "b"}, kT0), kT0);
  EXPECT_TRUE(handed.empty());
  observer.OnReady(0, Ready({"a", "b"}, kT0), kT0);
  observer.OnReady(0, Ready({"a", "b"}, kT0), kT0);
  observer.OnReady(0, Ready({"a"}, kT0), kT0);  // the second step of set 0's tensors
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0], t.autotune_info().best);
}

TEST(JobTelemetryTest, TimelineMapsRankPhasesOntoTheCoordinatorClock) {
  const std::string path = ::testing::TempDir() + "/telemetry_phases.json";
  {
    JobTelemetry t("job", 1, std::nullopt, {});
    ASSERT_TRUE(t.StartTimeline(path, 1 << 20, kT0).ok());
    // The rank's clock is 10 s behind; its report took at least 1 ms to arrive.
    ExecReport report = Report(0, kT0 - absl::Seconds(10), 0);
    report.phases.push_back({PhaseKind::kCollective,
                             kT0 - absl::Seconds(10) + absl::Milliseconds(2),
                             kT0 - absl::Seconds(10) + absl::Milliseconds(3),
                             {"x"}});
    t.OnReport(report, kT0 + absl::Milliseconds(1));
    t.OnReady(Ready({"x"}, kT0), kT0);
    ASSERT_TRUE(t.StopTimeline().ok());
  }
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  // Offset 10 s + 1 ms: the phase lands at 3 ms .. 4 ms after the origin.
  EXPECT_THAT(text.str(), HasSubstr("\"name\":\"collective\""));
  EXPECT_THAT(text.str(), HasSubstr("\"ts\":3000.000,\"dur\":1000.000"));
  EXPECT_THAT(text.str(), HasSubstr("\"name\":\"x\""));
}

}  // namespace
}  // namespace troika::coordinator
