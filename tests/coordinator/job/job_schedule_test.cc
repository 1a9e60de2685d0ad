// Job's side of steady-state schedules, driven directly: a schedule forms from repeated cached
// steps; the ranks' progress reports become straggler statistics, metrics and pending tensors;
// malformed reports are refused; a rank's deviation is broadcast once.

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/job/job.h"
#include "coordinator/job/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_schedule_fixture.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::JobScheduleTest;
using test_util::Samples;
using ::testing::HasSubstr;

TEST_F(JobScheduleTest, RoundsEveryRankReportedBecomeStragglerStatisticsAndMetrics) {
  const int64_t before = job_->Describe().stragglers.tensors;
  const int64_t counted = job_->MetricsSnapshot().ops[0].count;
  // Rank 0's tensors waited 40 ms for their entries, rank 1's 10 ms: rank 1 came 30 ms later.
  ASSERT_TRUE(job_->ReportExec(&s0_, Report(0, 0, 3, {50, 50}, 10)).ok());
  EXPECT_EQ(job_->Describe().stragglers.tensors, before) << "rank 1 has not reported yet";
  ASSERT_TRUE(job_->ReportExec(&s1_, Report(1, 0, 2, {20, 20}, 10)).ok());
  StragglerSnapshot s = job_->Describe().stragglers;
  EXPECT_EQ(s.tensors, before + 2 * 2) << "rounds 0 and 1, 2 tensors each";
  EXPECT_EQ(s.ranks[1].max_lateness, absl::Milliseconds(30));
  EXPECT_EQ(s.ranks[0].max_lateness, absl::ZeroDuration());
  EXPECT_EQ(job_->MetricsSnapshot().ops[0].count, counted + 4);
  // Round 2 completes with rank 1's next report; a round reported again counts once.
  ASSERT_TRUE(job_->ReportExec(&s1_, Report(1, 1, 2, {20, 20}, 10)).ok());
  EXPECT_EQ(job_->Describe().stragglers.tensors, before + 3 * 2);
}

TEST_F(JobScheduleTest, WaitingTensorsArePendingWithTheRanksThatDoNotReportThem) {
  ExecReport report = Report(0, 0, 0, {}, 0);
  report.schedule->waiting.push_back({0, 4, absl::Seconds(2)});
  ASSERT_TRUE(job_->ReportExec(&s0_, report).ok());
  JobInfo info = job_->Describe();
  ASSERT_EQ(info.pending.size(), 1u);
  EXPECT_EQ(info.pending[0].name, schedule_->entries[0].names[0]);
  EXPECT_EQ(info.pending[0].missing_ranks, std::vector<int>{1});
  EXPECT_EQ(info.pending[0].waiting, absl::Seconds(2));
  // Reported again later: the first arrival stays.
  clock_.Advance(absl::Seconds(1));
  report = Report(0, 0, 0, {}, 0);
  report.schedule->waiting.push_back({0, 4, absl::Seconds(3)});
  ASSERT_TRUE(job_->ReportExec(&s0_, report).ok());
  EXPECT_EQ(job_->Describe().pending[0].waiting, absl::Seconds(3));
  // Nothing waits any more: nothing pending.
  ASSERT_TRUE(job_->ReportExec(&s0_, Report(0, 4, 1, {5, 5}, 1)).ok());
  EXPECT_TRUE(job_->Describe().pending.empty());
}

TEST_F(JobScheduleTest, MalformedProgressIsRefused) {
  ExecReport partial = Report(0, 0, 1, {5, 5}, 1);
  partial.schedule->submitted_ago.pop_back();
  absl::Status s = job_->ReportExec(&s0_, partial);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not whole rounds"));
  ExecReport beyond = Report(0, 0, 0, {}, 0);
  beyond.schedule->waiting.push_back({2, 0, absl::Seconds(1)});
  s = job_->ReportExec(&s0_, beyond);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not tensor 2"));
  ExecReport cut = Report(0, 0, 0, {}, 0);
  cut.schedule->cut_after = {1, 2};  // x and y: tensors 0 and 1
  s = job_->ReportExec(&s0_, cut);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no tensor after 2"));
  cut.schedule->cut_after = {-1};
  EXPECT_EQ(job_->ReportExec(&s0_, cut).code(), absl::StatusCode::kInvalidArgument);
  ExecReport overflow = Report(0, std::numeric_limits<int64_t>::max(), 1, {5, 5}, 1);
  EXPECT_EQ(job_->ReportExec(&s0_, overflow).code(), absl::StatusCode::kInvalidArgument);
  // Another schedule's progress (one that ended) is history, not an error.
  ExecReport other = Report(0, 0, 1, {5, 5}, 1);
  other.schedule->schedule = schedule_->id + 1;
  EXPECT_TRUE(job_->ReportExec(&s0_, other).ok());
}

TEST_F(JobScheduleTest, ADeviationIsBroadcastOnceAndOnlyForTheScheduleInForce) {
  auto ends = [](FakeSink& sink) {
    int n = 0;
    for (const DownMessage& m : sink.messages()) n += m.end_schedule != 0;
    return n;
  };
  EXPECT_TRUE(job_->DeviateSchedule(&s0_, schedule_->id + 1, {0}).ok());
  EXPECT_EQ(ends(s1_), 0) << "not the schedule in force";
  EXPECT_FALSE(job_->DeviateSchedule(&s0_, schedule_->id, {1}).ok()) << "rank 1 is not s0's";
  ASSERT_TRUE(job_->DeviateSchedule(&s0_, schedule_->id, {0}).ok());
  ASSERT_TRUE(job_->DeviateSchedule(&s1_, schedule_->id, {1}).ok());
  EXPECT_EQ(ends(s0_), 1);
  EXPECT_EQ(ends(s1_), 1);
  EXPECT_EQ(s1_.messages().back().end_schedule, schedule_->id);
}

// A rank sent a scheduled tensor and then a join before it had the schedule: both are
// dropped, and the rank sends them again, in that order, once it ended the schedule. (Had the
// join been taken, the tensor would have completed with the rank as a joined one, and its
// request, sent again, would have stayed pending.)
TEST_F(JobScheduleTest, AJoinSentAfterAScheduledRequestIsDroppedWithIt) {
  auto request = [&](int rank, bool join) {
    TensorRequest r;
    r.rank = rank;
    if (join) {
      r.name = kJoinTensorName;
      r.type = CollectiveType::kJoin;
      r.dtype = DataType::kUint8;
    } else {
      r.cache_id = ids_["x"];
    }
    return r;
  };
  // The responses rank 1's session got from message `from` on: for x, and joins.
  auto responses = [&](size_t from, const std::string& name) {
    std::vector<Response> out;
    const std::vector<DownMessage> messages = s1_.messages();
    for (size_t m = from; m < messages.size(); ++m) {
      for (const Response& r : messages[m].responses) {
        const bool x = !r.cache_ids.empty() && r.cache_ids.front() == ids_["x"];
        if (name == "x" ? x || (!r.names.empty() && r.names.front() == "x")
                        : r.type == CollectiveType::kJoin) {
          out.push_back(r);
        }
      }
    }
    return out;
  };
  ASSERT_TRUE(job_->Submit(&s0_, {request(0, false), request(0, true)}).ok());
  ASSERT_TRUE(job_->EndSchedule(&s0_, schedule_->id, {0}).ok());
  ASSERT_TRUE(job_->EndSchedule(&s1_, schedule_->id, {1}).ok());
  const size_t from = s1_.messages().size();
  ASSERT_TRUE(job_->Submit(&s1_, {request(1, false)}).ok());
  EXPECT_THAT(responses(from, "x"), ::testing::IsEmpty()) << "x waits for rank 0's request";
  ASSERT_TRUE(job_->Submit(&s0_, {request(0, false), request(0, true)}).ok());
  std::vector<Response> x = responses(from, "x");
  ASSERT_EQ(x.size(), 1u);
  EXPECT_FALSE(x[0].is_error()) << x[0].error;
  EXPECT_THAT(x[0].joined_ranks, ::testing::IsEmpty());
  EXPECT_THAT(responses(from, "join"), ::testing::IsEmpty());
  ASSERT_TRUE(job_->Submit(&s1_, {request(1, true)}).ok());
  EXPECT_EQ(responses(from, "join").size(), 1u);
}

}  // namespace
}  // namespace troika::coordinator
