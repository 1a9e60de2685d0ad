// Inspection on its own, over real parts and a real JobNegotiation of 2 ranks: what it does
// about what its inspectors find — a deadlock or a stall past the shutdown time aborts a running
// job (and only a running one), a timeline makes every session report its phases, a report
// that does not fit names its rank.

#include "coordinator/job/inspection.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::Allreduce;
using test_util::FakeSink;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kSize = 2;

class InspectionTest : public ::testing::Test {
 protected:
  InspectionTest()
      : roster_("j", kSize, 1, scheduler_),
        sessions_("j", kSize, {}),
        generations_(kSize, options_, clock_.Now()),
        kv_(scheduler_),
        lifecycle_(
            "j", roster_, sessions_, generations_, kv_, scheduler_,
            [this](AbortCause cause) { aborts_.push_back(cause); }, [] {}) {}

  void Make(JobOptions options) {
    inspection_ = std::make_unique<Inspection>(
        "j", kSize, options, negotiation_, roster_, sessions_, lifecycle_, scheduler_, clock_, mu_,
        [this] { return std::weak_ptr<const void>(owner_); });
  }
  // Both ranks attach, the job runs, and each rank has a session.
  void RunJob() {
    roster_.Wait(
        {0, 1}, "h", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
    roster_.Complete();
    lifecycle_.Run();
    ASSERT_TRUE(sessions_.Open({0}, &sink0_, {}).ok());
    ASSERT_TRUE(sessions_.Open({1}, &sink1_, {}).ok());
  }
  void Submit(const std::string& name, int rank) {
    DownMessage misses;
    ASSERT_TRUE(
        negotiation_
            .Submit(
                {Allreduce(name, rank)}, clock_.Now(), [](int) { return absl::OkStatus(); }, misses)
            .ok());
  }
  void Wait(int rank, std::vector<std::string> names) {
    inspection_->UpdateWaits({.rank = rank, .waiting_for = std::move(names)});
  }

  Scheduler scheduler_;
  FakeClock clock_;
  std::mutex mu_;
  std::shared_ptr<int> owner_ = std::make_shared<int>(0);
  JobOptions options_;
  JobNegotiation negotiation_{"j", kSize, NegotiatorOptions{}, ScheduleOptions{},
                              [](std::shared_ptr<const DownMessage>) {}};
  Roster roster_;
  Sessions sessions_;
  Generations generations_;
  KvStore kv_;
  std::vector<AbortCause> aborts_;
  Lifecycle lifecycle_;
  FakeSink sink0_, sink1_;
  std::unique_ptr<Inspection> inspection_;
};

TEST_F(InspectionTest, EveryRankBlockedOnPendingTensorsAbortsARunningJobAsADeadlock) {
  Make(JobOptions{});
  Submit("a", 0);
  Submit("b", 1);
  Wait(0, {"a"});
  Wait(1, {"b"});
  EXPECT_TRUE(aborts_.empty()) << "a job that does not run yet takes no wait state";

  RunJob();
  Wait(0, {"a"});
  EXPECT_TRUE(aborts_.empty()) << "rank 1 is not blocked";
  Wait(1, {"b"});
  EXPECT_THAT(aborts_, ElementsAre(AbortCause::kDeadlock));
  EXPECT_EQ(lifecycle_.state(), Lifecycle::State::kAborted);
  EXPECT_THAT(lifecycle_.abort_reason(), HasSubstr("rank 1 waits for 'b'"));
  ASSERT_FALSE(sink1_.messages().empty());
  EXPECT_THAT(sink1_.messages().back().abort_reason, HasSubstr("job 'j' aborted"));
}

TEST_F(InspectionTest, TheRanksLeftBlockedOnPendingTensorsAreADeadlockOnceTheOtherLeft) {
  Make(JobOptions{});
  RunJob();
  Submit("a", 0);
  Wait(0, {"a"});
  EXPECT_TRUE(aborts_.empty()) << "rank 1 is in the job and not blocked";
  roster_.Depart(1);
  inspection_->Forget(1);
  inspection_->CheckDeadlock();
  EXPECT_THAT(aborts_, ElementsAre(AbortCause::kDeadlock));
}

TEST_F(InspectionTest, ATensorPastTheStallShutdownTimeAbortsTheJob) {
  JobOptions options;
  options.stall = {.warning_time = absl::Seconds(60), .shutdown_time = absl::Seconds(120)};
  Make(options);
  RunJob();
  Submit("a", 0);
  inspection_->Submitted(clock_.Now());
  clock_.Advance(absl::Seconds(61));
  inspection_->InspectStalls();
  EXPECT_TRUE(aborts_.empty()) << "warned about only";
  clock_.Advance(absl::Seconds(60));
  inspection_->InspectStalls();
  EXPECT_THAT(aborts_, ElementsAre(AbortCause::kStall));
  EXPECT_THAT(lifecycle_.abort_reason(), HasSubstr("'a'"));
}

TEST_F(InspectionTest, ATimelineMakesEverySessionReportItsPhasesUntilItStops) {
  Make(JobOptions{});
  RunJob();
  const std::string path = ::testing::TempDir() + "/inspection_test_timeline.json";
  ASSERT_TRUE(inspection_->StartTimeline(path, 1 << 20).ok());
  for (FakeSink* sink : {&sink0_, &sink1_}) {
    ASSERT_FALSE(sink->messages().empty());
    ASSERT_TRUE(sink->messages().back().settings.has_value());
    EXPECT_TRUE(sink->messages().back().settings->report_phases);
    EXPECT_GT(sink->messages().back().settings->report_interval_ms, 0);
  }
  ASSERT_TRUE(inspection_->StopTimeline().ok());
  ASSERT_TRUE(sink0_.messages().back().settings.has_value());
  EXPECT_FALSE(sink0_.messages().back().settings->report_phases);
  std::remove(path.c_str());
}

TEST_F(InspectionTest, AReportThatDoesNotFitNamesItsRank) {
  Make(JobOptions{});
  RunJob();
  ExecReport report;
  report.rank = 1;
  report.steps.push_back({.duration = absl::Hours(25)});
  absl::Status status = inspection_->Report(report);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("execution report of rank 1: "));
  report.steps = {{.duration = absl::Milliseconds(5),
                   .compute = absl::Milliseconds(3),
                   .communication = absl::Milliseconds(2)}};
  EXPECT_TRUE(inspection_->Report(report).ok());
  EXPECT_EQ(inspection_->metrics().Snapshot().steps[0].histogram.sample_count, 1u);
}

}  // namespace
}  // namespace troika::coordinator
