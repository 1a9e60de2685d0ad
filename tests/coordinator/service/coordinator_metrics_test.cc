// JobMetrics (what a job accumulates) and CoordinatorMetrics (the scrape built from the job
// registry), against docs/metrics.md.

#include "coordinator/service/coordinator_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <string>

#include "coordinator/inspection/job_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::Samples;
using ::testing::HasSubstr;

StepSample Step(int duration_ms, int compute_ms, int wait_ms, int comm_ms) {
  return {absl::Milliseconds(duration_ms), absl::Milliseconds(compute_ms),
          absl::Milliseconds(wait_ms), absl::Milliseconds(comm_ms)};
}

TEST(JobMetricsTest, StepSamplesFillTheFourHistograms) {
  JobMetrics metrics;
  ASSERT_TRUE(metrics.OnSteps({Step(100, 60, 10, 30), Step(300, 200, 20, 80)}).ok());
  JobMetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.steps[0].histogram.sample_count, 2u);
  EXPECT_NEAR(s.steps[0].histogram.sample_sum, 0.4, 1e-9);
  EXPECT_NEAR(s.steps[1].histogram.sample_sum, 0.26, 1e-9);
  EXPECT_NEAR(s.steps[2].histogram.sample_sum, 0.03, 1e-9);
  EXPECT_NEAR(s.steps[3].histogram.sample_sum, 0.11, 1e-9);
  // Bucket le=0.1 holds the 100 ms step only; le=0.5 both.
  std::map<double, uint64_t> cumulative;
  for (const auto& bucket : s.steps[0].histogram.bucket) {
    cumulative[bucket.upper_bound] = bucket.cumulative_count;
  }
  EXPECT_EQ(cumulative.at(0.1), 1u);
  EXPECT_EQ(cumulative.at(0.5), 2u);
}

TEST(JobMetricsTest, InvalidStepSampleIsRejectedAndNothingRecorded) {
  JobMetrics metrics;
  absl::Status negative = metrics.OnSteps({Step(10, 10, 0, 0), Step(-5, 0, 0, 0)});
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  absl::Status unbalanced = metrics.OnSteps({Step(100, 10, 10, 10)});
  EXPECT_EQ(unbalanced.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unbalanced.message()), HasSubstr("add up"));
  EXPECT_EQ(metrics.Snapshot().steps[0].histogram.sample_count, 0u);
}

TEST(JobMetricsTest, ReadyTensorsAreCountedByCollectiveWithTheirBytes) {
  JobMetrics metrics;
  auto record = [](CollectiveType type, int64_t bytes) {
    ReadyRecord r;
    r.type = type;
    r.bytes = bytes;
    return r;
  };
  metrics.OnReady({record(CollectiveType::kAllreduce, 400), record(CollectiveType::kAllreduce, 100),
                   record(CollectiveType::kBroadcast, 8)});
  JobMetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.ops[static_cast<int>(CollectiveType::kAllreduce)].count, 2);
  EXPECT_EQ(s.ops[static_cast<int>(CollectiveType::kAllreduce)].bytes, 500);
  EXPECT_EQ(s.ops[static_cast<int>(CollectiveType::kBroadcast)].count, 1);
  EXPECT_EQ(s.ops[static_cast<int>(CollectiveType::kAllgather)].count, 0);
}

TEST(JobMetricsTest, FusionFillIsResponseBytesOverTheThreshold) {
  JobMetrics metrics;
  metrics.OnAllreduceResponses({512, 1024}, 1024);
  metrics.OnAllreduceResponses({512}, 0);  // fusion off: nothing to fill
  JobMetricsSnapshot s = metrics.Snapshot();
  EXPECT_EQ(s.fusion_fill.histogram.sample_count, 2u);
  EXPECT_NEAR(s.fusion_fill.histogram.sample_sum, 1.5, 1e-9);
}

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  JobRegistryOptions Options() {
    JobRegistryOptions o;
    o.job.negotiator.cycle_time = absl::ZeroDuration();
    o.max_jobs = 2;
    return o;
  }
  std::vector<prometheus::MetricFamily> Scrape() { return metrics_.Collect(); }

  TensorRequest Request(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.shape = {2};  // float32: 8 bytes
    return r;
  }

  // The registry goes first: nothing may run on its scheduler then (a job ending calls
  // back into it there).
  void TearDown() override { scheduler_.Stop(); }

  Scheduler scheduler_;
  FakeClock clock_;
  JobRegistry registry_{Options(), scheduler_, clock_};
  CoordinatorMetrics metrics_{registry_,
                              {.max_rank_series = 4, .stall_warning_time = absl::Seconds(60)}};
};

TEST_F(CoordinatorMetricsTest, LiveJobSeriesCarryTheJobLabel) {
  bool created = false;
  std::shared_ptr<Job> job = *registry_.CreateJob("train", 2, &created);
  AttachAll(*job, {"a", "a"});
  FakeSink s0, s1;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &s1).ok());
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "x")}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "x")}).ok());
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "late")}).ok());
  clock_.Advance(absl::Seconds(61));
  ExecReport report;
  report.rank = 1;
  report.steps = {Step(100, 60, 10, 30)};
  ASSERT_TRUE(job->ReportExec(&s1, report).ok());

  const auto families = Scrape();
  EXPECT_EQ(Samples(families, "troika_jobs_active")[""], 1);
  EXPECT_EQ(Samples(families, "troika_jobs_started_total")[""], 1);
  EXPECT_EQ(Samples(families, "troika_job_ranks")["troika_job=train"], 2);
  EXPECT_EQ(Samples(families, "troika_job_ranks_alive")["troika_job=train"], 2);
  EXPECT_EQ(Samples(families, "troika_collectives_total")["op=allreduce,troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_collective_bytes_total")["op=allreduce,troika_job=train"], 8);
  EXPECT_EQ(Samples(families, "troika_step_duration_seconds")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_pending_tensors")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_stalled_tensors")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_rank_lateness_seconds").size(), 2u);
  EXPECT_EQ(Samples(families, "troika_fusion_fill_ratio")["troika_job=train"], 1);
  EXPECT_TRUE(Samples(families, "troika_autotune_samples_total").empty());  // not tuning
}

TEST_F(CoordinatorMetricsTest, InvalidStepReportIsRefusedAsAProtocolError) {
  bool created = false;
  std::shared_ptr<Job> job = *registry_.CreateJob("train", 1, &created);
  AttachAll(*job, {"a"});
  FakeSink s0;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ExecReport report;
  report.steps = {Step(-1, 0, 0, 0)};
  EXPECT_EQ(job->ReportExec(&s0, report).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Samples(Scrape(), "troika_step_duration_seconds")["troika_job=train"], 0);
}

TEST_F(CoordinatorMetricsTest, PerRankSeriesOnlyForJobsWithinTheCap) {
  bool created = false;
  std::shared_ptr<Job> job = *registry_.CreateJob("big", 5, &created);
  EXPECT_EQ(Samples(Scrape(), "troika_job_ranks")["troika_job=big"], 5);
  EXPECT_TRUE(Samples(Scrape(), "troika_rank_lateness_seconds").empty());
}

TEST_F(CoordinatorMetricsTest, AbortsAreCountedByCause) {
  bool created = false;
  std::shared_ptr<Job> a = *registry_.CreateJob("a", 1, &created);
  std::shared_ptr<Job> b = *registry_.CreateJob("b", 1, &created);
  a->Abort(AbortCause::kCancelled, "test");
  registry_.AbortAll("coordinator shutting down");
  const auto aborts = Samples(Scrape(), "troika_job_aborts_total");
  EXPECT_EQ(aborts.at("reason=cancelled"), 1);
  EXPECT_EQ(aborts.at("reason=shutdown"), 1);  // a was already aborted
  EXPECT_EQ(aborts.at("reason=deadlock"), 0);
}

TEST_F(CoordinatorMetricsTest, RankExitAndLostSessionAreCountedAndReleasedJobsEndAborted) {
  bool created = false;
  std::shared_ptr<Job> exited = *registry_.CreateJob("exited", 1, &created);
  std::shared_ptr<Job> lost = *registry_.CreateJob("lost", 2, &created);
  AttachAll(*exited, {"a"});
  AttachAll(*lost, {"a", "b"});
  FakeSink e0, l0, l1;
  ASSERT_TRUE(exited->OpenSession({0}, 1, &e0).ok());
  ASSERT_TRUE(lost->OpenSession({0}, 1, &l0).ok());
  ASSERT_TRUE(lost->OpenSession({1}, 1, &l1).ok());
  ASSERT_TRUE(exited->ReportExit(&e0, RankExit{.rank = 0, .host = "a", .exit_code = 1}).ok());
  lost->CloseSession(&l1, absl::OkStatus());
  exited->CloseSession(&e0, absl::OkStatus());
  lost->CloseSession(&l0, absl::OkStatus());
  exited.reset();
  lost.reset();
  // Both jobs are done; the registry drops them on the scheduler's thread, in order before a
  // callback scheduled now.
  std::promise<void> drained;
  scheduler_.RunAfter(absl::ZeroDuration(), [&drained] { drained.set_value(); });
  drained.get_future().wait();

  const auto families = Scrape();
  const auto aborts = Samples(families, "troika_job_aborts_total");
  EXPECT_EQ(aborts.at("reason=rank_exit"), 1);
  EXPECT_EQ(aborts.at("reason=connection_lost"), 1);
  const auto ended = Samples(families, "troika_jobs_ended_total");
  EXPECT_EQ(ended.at("outcome=aborted"), 2);
  EXPECT_EQ(ended.at("outcome=finished"), 0);
  EXPECT_EQ(Samples(families, "troika_jobs_active")[""], 0);
  EXPECT_TRUE(Samples(families, "troika_job_ranks").empty());  // series gone with the jobs
}

TEST_F(CoordinatorMetricsTest, AnElasticJobsNewGenerationIsCountedAndItsSizeReported) {
  bool created = false;
  std::shared_ptr<Job> job = *registry_.CreateJob("el", 3, &created, {}, /*min_size=*/2);
  AttachAll(*job, {"a", "a", "a"});
  FakeSink node;
  ASSERT_TRUE(job->OpenSession({0, 1, 2}, 1, &node).ok());
  EXPECT_EQ(Samples(Scrape(), "troika_membership_changes_total").at("reason=rank_exit"), 0);
  ASSERT_TRUE(job->ReportExit(&node, RankExit{.rank = 2, .host = "a", .signal = 9}).ok());
  const auto families = Scrape();
  const auto changes = Samples(families, "troika_membership_changes_total");
  EXPECT_EQ(changes.at("reason=rank_exit"), 1);
  EXPECT_EQ(changes.at("reason=connection_lost"), 0);
  EXPECT_EQ(changes.at("reason=nodes_joined"), 0);
  EXPECT_EQ(Samples(families, "troika_job_aborts_total").at("reason=rank_exit"), 0);
  EXPECT_EQ(Samples(families, "troika_job_ranks")["troika_job=el"], 2) << "the new generation";
  EXPECT_EQ(Samples(families, "troika_membership_recovery_seconds")[""], 0) << "not yet";

  // The next generation's first responses: it has recovered, 1.5 s after the loss.
  job->CloseSession(&node, absl::OkStatus());
  std::shared_ptr<Job> next = *registry_.Find("el");
  AttachAll(*next, {"a", "a"});
  FakeSink node2;
  ASSERT_TRUE(next->OpenSession({0, 1}, 2, &node2).ok());
  clock_.Advance(absl::Milliseconds(1500));
  ASSERT_TRUE(next->Submit(&node2, {Request(0, "w"), Request(1, "w")}).ok());
  ASSERT_TRUE(next->Submit(&node2, {Request(0, "v"), Request(1, "v")}).ok());
  for (const auto& family : Scrape()) {
    if (family.name != "troika_membership_recovery_seconds") continue;
    ASSERT_EQ(family.metric.size(), 1u);
    EXPECT_EQ(family.metric[0].histogram.sample_count, 1u) << "once per generation";
    EXPECT_DOUBLE_EQ(family.metric[0].histogram.sample_sum, 1.5);
  }
}

TEST_F(CoordinatorMetricsTest, RegistryRefusesJobsBeyondMaxJobs) {
  bool created = false;
  ASSERT_TRUE(registry_.CreateJob("a", 1, &created).ok());
  ASSERT_TRUE(registry_.CreateJob("b", 1, &created).ok());
  absl::StatusOr<std::shared_ptr<Job>> c = registry_.CreateJob("c", 1, &created);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--max_jobs"));
  EXPECT_TRUE(registry_.CreateJob("a", 1, &created).ok());  // an existing job is no new one
}

// The scrape passes Prometheus' own linter: names, types, units, HELP texts.
TEST_F(CoordinatorMetricsTest, ScrapePassesPromtoolCheckMetrics) {
  bool created = false;
  std::shared_ptr<Job> job = *registry_.CreateJob("train", 2, &created);
  AttachAll(*job, {"a", "a"});
  registry_.CreateJob("other", 1, &created).IgnoreError();
  const std::string text = prometheus::TextSerializer().Serialize(Scrape());
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/coordinator_metrics_scrape.txt";
  const std::string out = dir + "/coordinator_metrics_promtool.txt";
  std::ofstream(in) << text;
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  std::ifstream result(out);
  const std::string report((std::istreambuf_iterator<char>(result)), {});
  ASSERT_NE(WEXITSTATUS(rc), 127)
      << "promtool is not installed: install the Debian package `prometheus` (/usr/bin/promtool)";
  EXPECT_EQ(WEXITSTATUS(rc), 0) << report << "\n" << text;
  EXPECT_EQ(report, "") << text;
}

}  // namespace
}  // namespace troika::coordinator
