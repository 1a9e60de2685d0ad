// Job's side of steady-state schedules, driven directly: a schedule forms from repeated cached
// steps; the ranks' progress reports become straggler statistics, metrics and pending tensors;
// malformed reports are refused; a rank's deviation is broadcast once; the scrape shows it.

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job.h"
#include "coordinator/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::Samples;
using ::testing::HasSubstr;

class JobScheduleTest : public ::testing::Test {
 protected:
  static JobRegistryOptions Options() {
    JobRegistryOptions options;
    options.negotiator.cycle_time = absl::ZeroDuration();
    options.schedules = true;
    return options;
  }

  void SetUp() override {
    bool created = false;
    absl::StatusOr<std::shared_ptr<Job>> job = registry_.CreateJob("train", 2, &created);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    AttachAll(*job_, {"a", "a"});
    ASSERT_TRUE(job_->OpenSession({0}, 1, &s0_).ok());
    ASSERT_TRUE(job_->OpenSession({1}, 1, &s1_).ok());
    // Steps of x (2 floats) and y (3 floats), sent by cache id once the ids are known, until
    // the job publishes a schedule.
    for (int step = 0; step < 10 && !schedule_; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<TensorRequest> requests;
        for (const auto& [name, elements] : {std::pair<std::string, int64_t>{"x", 2}, {"y", 3}}) {
          TensorRequest r;
          r.rank = rank;
          r.name = name;
          r.shape = {elements};
          if (ids_.count(name)) {
            r = TensorRequest{};
            r.rank = rank;
            r.cache_id = ids_[name];
          }
          requests.push_back(r);
        }
        ASSERT_TRUE(job_->Submit(rank == 0 ? &s0_ : &s1_, requests).ok());
      }
      for (const DownMessage& m : s0_.messages()) {
        for (const Response& r : m.responses) {
          for (size_t i = 0; i < r.cache_ids.size() && i < r.names.size(); ++i) {
            ids_[r.names[i]] = r.cache_ids[i];
          }
        }
        if (m.schedule) schedule_ = m.schedule;
      }
    }
    ASSERT_TRUE(schedule_.has_value()) << "no schedule formed";
  }

  // Rank `rank`'s report of `rounds` rounds from `first`: tensor n submitted `submitted_ms[n]`
  // and each entry completed `completed_ms` before it was sent.
  ExecReport Report(int rank, int64_t first, int rounds, std::vector<int> submitted_ms,
                    int completed_ms) {
    ExecReport report;
    report.rank = rank;
    report.sent_at = clock_.Now();
    ScheduleProgress& p = report.schedule.emplace();
    p.schedule = schedule_->id;
    p.first_round = first;
    for (int i = 0; i < rounds; ++i) {
      for (int ms : submitted_ms) p.submitted_ago.push_back(absl::Milliseconds(ms));
      for (size_t e = 0; e < schedule_->entries.size(); ++e) {
        p.completed_ago.push_back(absl::Milliseconds(completed_ms));
      }
    }
    return report;
  }

  Scheduler scheduler_;
  FakeClock clock_;
  JobRegistry registry_{Options(), scheduler_, clock_};
  std::shared_ptr<Job> job_;
  FakeSink s0_, s1_;
  std::map<std::string, int32_t> ids_;
  std::optional<Schedule> schedule_;
};

TEST_F(JobScheduleTest, RoundsEveryRankReportedBecomeStragglerStatisticsAndMetrics) {
  const int64_t before = job_->StragglerSnapshot().tensors;
  const int64_t counted = job_->MetricsSnapshot().ops[0].count;
  // Rank 0's tensors waited 40 ms for their entries, rank 1's 10 ms: rank 1 came 30 ms later.
  ASSERT_TRUE(job_->ReportExec(&s0_, Report(0, 0, 3, {50, 50}, 10)).ok());
  EXPECT_EQ(job_->StragglerSnapshot().tensors, before) << "rank 1 has not reported yet";
  ASSERT_TRUE(job_->ReportExec(&s1_, Report(1, 0, 2, {20, 20}, 10)).ok());
  StragglerSnapshot s = job_->StragglerSnapshot();
  EXPECT_EQ(s.tensors, before + 2 * 2) << "rounds 0 and 1, 2 tensors each";
  EXPECT_EQ(s.ranks[1].max_lateness, absl::Milliseconds(30));
  EXPECT_EQ(s.ranks[0].max_lateness, absl::ZeroDuration());
  EXPECT_EQ(job_->MetricsSnapshot().ops[0].count, counted + 4);
  // Round 2 completes with rank 1's next report; a round reported again counts once.
  ASSERT_TRUE(job_->ReportExec(&s1_, Report(1, 1, 2, {20, 20}, 10)).ok());
  EXPECT_EQ(job_->StragglerSnapshot().tensors, before + 3 * 2);
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

TEST_F(JobScheduleTest, TheScrapeShowsTheScheduleInForceAndTheEndedOnes) {
  CoordinatorMetrics metrics(registry_, {});
  auto families = metrics.Collect();
  EXPECT_EQ(Samples(families, "troika_schedules_total")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_schedules_ended_total")["troika_job=train"], 0);
  EXPECT_EQ(Samples(families, "troika_schedule_tensors")["troika_job=train"], 2);
  // Both ranks' void entry completed: the schedule ended.
  ASSERT_TRUE(job_->EndSchedule(&s0_, schedule_->id, {0}).ok());
  ASSERT_TRUE(job_->EndSchedule(&s1_, schedule_->id, {1}).ok());
  families = metrics.Collect();
  EXPECT_EQ(Samples(families, "troika_schedules_ended_total")["troika_job=train"], 1);
  EXPECT_EQ(Samples(families, "troika_schedule_tensors")["troika_job=train"], 0);
}

}  // namespace
}  // namespace troika::coordinator
