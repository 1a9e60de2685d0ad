// Schedules on their own, over a real set-0 Negotiator of 2 ranks: a period that repeats is
// published to every session; rounds every rank reported become ready records; what ranks
// wait for is pending; neighbours that never wait on each other are fused into the next
// schedule; deviations, ends, restarts and malformed reports.

#include "coordinator/negotiation/schedules.h"

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/negotiation/bucketing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::kT0;
using test_util::NoHold;
using test_util::PollNow;
using ::testing::HasSubstr;

constexpr int kSize = 2;

// Steps of x (2 floats) then y (3 floats), each its own response; every rank sends a tensor
// by its cache id once it knows it, as agents do.
class SchedulesTest : public ::testing::Test {
 protected:
  explicit SchedulesTest(ScheduleOptions options = {.enabled = true})
      : schedules_("train", kSize, options, whole_job_,
                   [this](std::shared_ptr<const DownMessage> m) { sent_.push_back(*m); }) {}

  // One step; after each response a schedule is published if one was found (the job could
  // take one), as Job offers one after every flush.
  void Step() {
    for (const auto& [name, elements] : {std::pair<std::string, int64_t>{"x", 2}, {"y", 3}}) {
      for (int rank = 0; rank < kSize; ++rank) {
        if (ids_.count(name)) {
          ASSERT_TRUE(whole_job_.SubmitCached(rank, ids_[name], kT0).ok());
          continue;
        }
        TensorRequest r;
        r.rank = rank;
        r.name = name;
        r.shape = {elements};
        ASSERT_TRUE(whole_job_.Submit(r, kT0).ok());
      }
      std::vector<Response> responses = PollNow(whole_job_);
      for (const Response& r : responses) ids_[r.names.at(0)] = r.cache_ids.at(0);
      schedules_.OnSending(responses, kT0);
      schedules_.MaybePublish();
    }
  }

  // Steps until a schedule is published (at most `steps`); returns it.
  std::optional<Schedule> StepUntilPublished(int steps = 10) {
    const size_t before = sent_.size();
    for (int step = 0; step < steps; ++step) {
      Step();
      for (size_t i = before; i < sent_.size(); ++i) {
        if (sent_[i].schedule) return sent_[i].schedule;
      }
    }
    return std::nullopt;
  }

  // `rounds` rounds from `first` of schedule `id`: tensor n submitted `submitted_ms[n]` and
  // each of `entries` entries completed `completed_ms` before the report.
  static ScheduleProgress Report(int64_t id, int64_t first, int rounds, size_t entries,
                                 std::vector<int> submitted_ms, int completed_ms) {
    ScheduleProgress p;
    p.schedule = id;
    p.first_round = first;
    for (int i = 0; i < rounds; ++i) {
      for (int ms : submitted_ms) p.submitted_ago.push_back(absl::Milliseconds(ms));
      for (size_t e = 0; e < entries; ++e) {
        p.completed_ago.push_back(absl::Milliseconds(completed_ms));
      }
    }
    return p;
  }

  // Every rank reports `rounds` rounds from `first` of `schedule`, none waiting on another.
  void RunRounds(const Schedule& schedule, int64_t first, int rounds) {
    for (int rank = 0; rank < kSize; ++rank) {
      Schedules::Rounds done;
      ASSERT_TRUE(
          schedules_
              .Progress(rank,
                        Report(schedule.id, first, rounds, schedule.entries.size(), {5, 5}, 1), kT0,
                        &done)
              .ok());
    }
  }

  int EndSchedulesSent() const {
    int n = 0;
    for (const DownMessage& m : sent_) n += m.end_schedule != 0;
    return n;
  }

  Negotiator whole_job_{kSize, NoHold()};
  std::vector<DownMessage> sent_;  // what every session was told
  Schedules schedules_;
  std::map<std::string, int32_t> ids_;
};

TEST_F(SchedulesTest, ARepeatingPeriodIsPublishedToEverySessionWithNamesAndRanksDropIt) {
  EXPECT_TRUE(schedules_.seeking());
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule) << "no schedule formed";
  EXPECT_EQ(schedule->id, 1);
  ASSERT_EQ(schedule->entries.size(), 2u) << "x and y were negotiated apart";
  for (const Response& entry : schedule->entries) EXPECT_FALSE(entry.ids_known);
  ScheduleInfo info = schedules_.Info();
  EXPECT_TRUE(info.enabled);
  EXPECT_EQ(info.active, 1);
  EXPECT_EQ(info.entries, 2);
  EXPECT_EQ(info.tensors, 2);
  EXPECT_EQ(info.executing_ranks, kSize);
  EXPECT_EQ(info.published, 1);
  EXPECT_FALSE(schedules_.seeking());
  // A request for x sent before the rank had the schedule is not negotiated; nor is a join
  // that follows it.
  TensorRequest x;
  x.rank = 0;
  x.cache_id = ids_["x"];
  EXPECT_TRUE(schedules_.Scheduled(x));
  EXPECT_TRUE(schedules_.Dropped(x));
  TensorRequest join;
  join.rank = 0;
  join.name = kJoinTensorName;
  join.type = CollectiveType::kJoin;
  EXPECT_FALSE(schedules_.Scheduled(join));
  EXPECT_TRUE(schedules_.Dropped(join));
  // A rank that left the schedule negotiates its requests again.
  schedules_.Leave(0);
  EXPECT_FALSE(schedules_.Scheduled(x));
  EXPECT_EQ(schedules_.Info().executing_ranks, 1);
}

TEST_F(SchedulesTest, RoundsEveryRankReportedBecomeReadyRecordsWithTheirEntriesBytes) {
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule);
  // Rank 0's tensors waited 40 ms for their entries, rank 1's 10 ms: rank 1 came 30 ms later.
  Schedules::Rounds rounds;
  ASSERT_TRUE(schedules_.Progress(0, Report(1, 0, 2, 2, {50, 50}, 10), kT0, &rounds).ok());
  EXPECT_TRUE(rounds.records.empty()) << "rank 1 has not reported yet";
  ASSERT_TRUE(schedules_.Progress(1, Report(1, 0, 1, 2, {20, 20}, 10), kT0, &rounds).ok());
  ASSERT_EQ(rounds.records.size(), 2u) << "round 0: x and y";
  const ReadyRecord& x = rounds.records[0];
  EXPECT_EQ(x.name, "x");
  EXPECT_TRUE(x.cached);
  EXPECT_EQ(x.bytes, 8);
  ASSERT_EQ(x.arrivals.size(), 2u);
  EXPECT_EQ(x.arrivals[1] - x.arrivals[0], absl::Milliseconds(30));
  EXPECT_EQ(x.ready_at, x.arrivals[1]);
  EXPECT_EQ(rounds.entry_bytes, (std::vector<int64_t>{8, 12}));
  EXPECT_FALSE(rounds.waiting);
  // Round 1 completes with rank 1's next report; a round reported again counts once.
  rounds = {};
  ASSERT_TRUE(schedules_.Progress(1, Report(1, 0, 2, 2, {20, 20}, 10), kT0, &rounds).ok());
  EXPECT_EQ(rounds.records.size(), 2u);
  // A report about another schedule is history.
  rounds = {};
  ASSERT_TRUE(schedules_.Progress(0, Report(7, 2, 1, 2, {1, 1}, 1), kT0, &rounds).ok());
  EXPECT_TRUE(rounds.records.empty());
}

TEST_F(SchedulesTest, WaitingTensorsArePendingWithTheRanksThatDoNotWaitAndKeepTheirArrival) {
  ASSERT_TRUE(StepUntilPublished());
  ScheduleProgress p = Report(1, 0, 0, 2, {}, 0);
  p.waiting.push_back({1, 4, absl::Seconds(2)});
  Schedules::Rounds rounds;
  ASSERT_TRUE(schedules_.Progress(0, p, kT0, &rounds).ok());
  EXPECT_TRUE(rounds.waiting);
  std::vector<PendingTensor> pending = schedules_.Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].name, "y");
  EXPECT_EQ(pending[0].missing_ranks, std::vector<int>{1});
  EXPECT_EQ(pending[0].first_arrival, kT0 - absl::Seconds(2));
  // Reported again later: the first arrival stays.
  p.waiting[0].submitted_ago = absl::Seconds(3);
  ASSERT_TRUE(schedules_.Progress(0, p, kT0 + absl::Seconds(1), &rounds).ok());
  EXPECT_EQ(schedules_.Pending()[0].first_arrival, kT0 - absl::Seconds(2));
  // Every rank waits for it: nobody is missing.
  ASSERT_TRUE(schedules_.Progress(1, p, kT0, &rounds).ok());
  EXPECT_TRUE(schedules_.Pending().empty());
  // A rank that leaves waits for nothing.
  schedules_.Leave(1);
  EXPECT_EQ(schedules_.Pending().size(), 1u);
}

TEST_F(SchedulesTest, ReportsThatAreNotWholeRoundsOrNameMissingTensorsAreRefused) {
  ASSERT_TRUE(StepUntilPublished());
  Schedules::Rounds rounds;
  ScheduleProgress torn = Report(1, 0, 1, 2, {5, 5}, 1);
  torn.completed_ago.pop_back();
  EXPECT_THAT(schedules_.Progress(0, torn, kT0, &rounds).message(), HasSubstr("not whole rounds"));
  ScheduleProgress waiting = Report(1, 0, 0, 2, {}, 0);
  waiting.waiting.push_back({2, 0, absl::Seconds(1)});
  EXPECT_THAT(schedules_.Progress(0, waiting, kT0, &rounds).message(), HasSubstr("not tensor 2"));
  ScheduleProgress cut = Report(1, 0, 0, 2, {}, 0);
  cut.cut_after = {-1};
  EXPECT_THAT(schedules_.Progress(0, cut, kT0, &rounds).message(), HasSubstr("no tensor after -1"));
  ScheduleProgress overflow = Report(1, std::numeric_limits<int64_t>::max(), 1, 2, {5, 5}, 1);
  EXPECT_FALSE(schedules_.Progress(0, overflow, kT0, &rounds).ok());
  EXPECT_TRUE(rounds.records.empty());
  EXPECT_TRUE(schedules_.Pending().empty());
}

TEST_F(SchedulesTest, NeighboursThatNeverWaitOnEachOtherAreFusedIntoTheNextSchedule) {
  std::optional<Schedule> first = StepUntilPublished();
  ASSERT_TRUE(first);
  RunRounds(*first, 0, Schedules::kLearnRounds - 1);
  EXPECT_EQ(EndSchedulesSent(), 0);
  RunRounds(*first, Schedules::kLearnRounds - 1, 1);
  // x and y may share a collective: the schedule is revoked, once.
  ASSERT_EQ(EndSchedulesSent(), 1);
  EXPECT_EQ(sent_.back().end_schedule, first->id);
  schedules_.Deviate(first->id, {0});
  EXPECT_EQ(EndSchedulesSent(), 1) << "revoked already";
  schedules_.End(first->id, {0, 1});
  EXPECT_EQ(schedules_.Info().ended, 1);
  EXPECT_EQ(schedules_.Info().active, 0);
  // The next one is seen repeating once more, and published bucketed.
  std::optional<Schedule> second = StepUntilPublished();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->id, first->id + 1);
  ASSERT_EQ(second->entries.size(), 1u);
  EXPECT_EQ(second->entries[0].names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(schedules_.Info().tensors, 2);
}

TEST_F(SchedulesTest, ACompletionSeenBetweenNeighboursKeepsThemApart) {
  std::optional<Schedule> first = StepUntilPublished();
  ASSERT_TRUE(first);
  for (int rank = 0; rank < kSize; ++rank) {
    ScheduleProgress p = Report(first->id, 0, Schedules::kLearnRounds, 2, {5, 5}, 1);
    p.cut_after = {0, 1};  // y may need x's result, and the next step's x y's
    Schedules::Rounds rounds;
    ASSERT_TRUE(schedules_.Progress(rank, p, kT0, &rounds).ok());
  }
  EXPECT_EQ(EndSchedulesSent(), 0) << "no neighbours may share a collective: nothing to gain";
  EXPECT_EQ(schedules_.Info().active, first->id);
}

// The pair of a period's last tensor and the next round's first is a pair like any other: with
// a completion seen between x and y alone, y shares a collective with the next step's x.
TEST_F(SchedulesTest, NeighboursAcrossThePeriodsEndAreFusedWhenNoRankWaitsBetweenThem) {
  std::optional<Schedule> first = StepUntilPublished();
  ASSERT_TRUE(first);
  for (int rank = 0; rank < kSize; ++rank) {
    ScheduleProgress p = Report(first->id, 0, Schedules::kLearnRounds, 2, {5, 5}, 1);
    p.cut_after = {0};  // y may need x's result
    Schedules::Rounds rounds;
    ASSERT_TRUE(schedules_.Progress(rank, p, kT0, &rounds).ok());
  }
  ASSERT_EQ(EndSchedulesSent(), 1) << "y and the next x may share a collective";
  schedules_.End(first->id, {0, 1});
  std::optional<Schedule> second = StepUntilPublished();
  ASSERT_TRUE(second);
  ASSERT_EQ(second->entries.size(), 1u);
  EXPECT_EQ(second->entries[0].names, (std::vector<std::string>{"y", "x"}));
}

TEST_F(SchedulesTest, BucketedSchedulesEndingInTheirFirstRoundTwiceKeepNegotiationsFusion) {
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule);
  RunRounds(*schedule, 0, Schedules::kLearnRounds);
  schedules_.End(schedule->id, {0, 1});
  for (int young = 0; young < Bucketing::kMaxYoungEnds; ++young) {
    schedule = StepUntilPublished();
    ASSERT_TRUE(schedule);
    EXPECT_EQ(schedule->entries.size(), 1u) << "bucketed";
    schedules_.End(schedule->id, {0, 1});  // before any round completed
  }
  schedule = StepUntilPublished();
  ASSERT_TRUE(schedule);
  EXPECT_EQ(schedule->entries.size(), 2u) << "negotiation's fusion from now on";
  EXPECT_EQ(schedules_.Info().ended, 1 + Bucketing::kMaxYoungEnds);
}

TEST_F(SchedulesTest, ADeviationRevokesOnceAndTheScheduleEndsWhenNoRankExecutesIt) {
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule);
  schedules_.Deviate(schedule->id + 1, {1});
  EXPECT_EQ(EndSchedulesSent(), 0) << "not the schedule in force";
  schedules_.Deviate(schedule->id, {1});
  schedules_.Deviate(schedule->id, {0});
  EXPECT_EQ(EndSchedulesSent(), 1);
  schedules_.End(schedule->id + 1, {0, 1});
  EXPECT_EQ(schedules_.Info().executing_ranks, kSize) << "an end of another schedule";
  schedules_.End(schedule->id, {1});
  EXPECT_EQ(schedules_.Info().active, schedule->id);
  schedules_.End(schedule->id, {0});
  EXPECT_EQ(schedules_.Info().active, 0);
  EXPECT_TRUE(schedules_.seeking());
}

TEST_F(SchedulesTest, IdsStartAboveThoseAnEarlierCoordinatorHandedOut) {
  schedules_.ReserveIdsThrough(41);
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule);
  EXPECT_EQ(schedule->id, 42);
}

class SchedulesOffTest : public SchedulesTest {
 protected:
  SchedulesOffTest() : SchedulesTest(ScheduleOptions{}) {}
};

TEST_F(SchedulesOffTest, NothingIsPublishedOrDropped) {
  EXPECT_FALSE(schedules_.seeking());
  EXPECT_FALSE(StepUntilPublished());
  EXPECT_TRUE(sent_.empty());
  EXPECT_FALSE(schedules_.Info().enabled);
  TensorRequest x;
  x.rank = 0;
  x.cache_id = ids_["x"];
  EXPECT_FALSE(schedules_.Dropped(x));
}

}  // namespace
}  // namespace troika::coordinator
