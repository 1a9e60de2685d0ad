// JobNegotiation on its own: a session's requests routed to every set (set 0's cache ids,
// compacted, and misses; other sets' rejections), the checks the job makes on them, what the
// observers are told, and schedules published, dropped and reported through it.

#include "coordinator/negotiation/job_negotiation.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::Allreduce;
using test_util::Control;
using test_util::kT0;
using test_util::NoHold;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr int kSize = 3;

// What a NegotiationObserver is told, as text.
class Recorder : public NegotiationObserver {
 public:
  void OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) override {
    std::string names;
    for (const ReadyRecord& r : records) absl::StrAppend(&names, names.empty() ? "" : ",", r.name);
    ready.emplace_back(set, names);
  }
  void OnAllreduceResponses(const std::vector<int64_t>& bytes, int64_t threshold) override {
    for (int64_t b : bytes) allreduce_bytes.push_back(b);
    fusion_threshold = threshold;
  }
  void OnSending(const std::vector<Response>& responses, absl::Time) override {
    sent += static_cast<int>(responses.size());
  }

  std::vector<std::pair<int, std::string>> ready;  // (set, names)
  std::vector<int64_t> allreduce_bytes;
  int64_t fusion_threshold = -1;
  int sent = 0;
};

TensorRequest Cached(int32_t id, int rank) {
  TensorRequest r;
  r.rank = rank;
  r.cache_id = id;
  return r;
}

class JobNegotiationTest : public ::testing::Test {
 protected:
  explicit JobNegotiationTest(ScheduleOptions schedules = {})
      : negotiation_("train", kSize, NoHold(), schedules,
                     [this](std::shared_ptr<const DownMessage> m) { broadcast_.push_back(*m); }) {
    negotiation_.AddObserver(recorder_);
  }

  // Submits `requests` as a session owning every rank but `foreign`.
  absl::Status Submit(std::vector<TensorRequest> requests, DownMessage* misses = nullptr,
                      int foreign = -1) {
    DownMessage ignored;
    return negotiation_.Submit(
        std::move(requests), kT0,
        [&](int rank) {
          return rank == foreign ? absl::PermissionDeniedError(absl::StrCat("not ", rank))
                                 : absl::OkStatus();
        },
        misses ? *misses : ignored);
  }

  // Reports what became ready, polls, and sends what is due, as the job's flush does.
  std::vector<Response> Flush() {
    negotiation_.ReportReady(kT0);
    absl::Time next;
    std::vector<Response> responses = negotiation_.Poll(kT0, {}, &next);
    negotiation_.Sending(responses, kT0);
    return responses;
  }

  // Every rank submits `name` in full in set 0; returns its cache id.
  int32_t Negotiate(const std::string& name) {
    for (int r = 0; r < kSize; ++r) EXPECT_TRUE(Submit({Allreduce(name, r)}).ok());
    std::vector<Response> responses = Flush();
    EXPECT_EQ(responses.size(), 1u);
    return responses.empty() || responses[0].cache_ids.empty() ? 0 : responses[0].cache_ids[0];
  }

  // Adds process set `ranks` through set 0's control barrier; returns its id.
  int AddSet(std::vector<int> ranks) {
    for (int r = 0; r < kSize; ++r) {
      EXPECT_TRUE(Submit({Control("troika/process_set/add/0", r, ranks)}).ok());
    }
    std::vector<Response> responses = Flush();
    EXPECT_EQ(responses.size(), 1u);
    return responses.empty() ? 0 : responses[0].root;
  }

  std::vector<DownMessage> broadcast_;
  Recorder recorder_;
  JobNegotiation negotiation_;
};

TEST_F(JobNegotiationTest, RanksSendingOneIdInARowGoInTogetherAndEndedIdsAreMissesPerRank) {
  const int32_t id = Negotiate("g");
  ASSERT_NE(id, 0);
  ASSERT_TRUE(Submit({Cached(id, 0), Cached(id, 1), Cached(id, 2)}).ok());
  std::vector<Response> responses = Flush();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].ids_known);
  DownMessage misses;
  ASSERT_TRUE(Submit({Cached(99, 0), Cached(99, 2)}, &misses).ok());
  ASSERT_EQ(misses.misses.size(), 2u);
  EXPECT_EQ(misses.misses[0].rank, 0);
  EXPECT_EQ(misses.misses[1].rank, 2);
  EXPECT_EQ(misses.misses[1].cache_id, 99);
  EXPECT_FALSE(negotiation_.has_pending());
}

TEST_F(JobNegotiationTest, ARankTheSessionDoesNotOwnEndsTheRunAndWhatCameBeforeStays) {
  const int32_t id = Negotiate("g");
  // Rank 2 is not the session's: ranks 0 and 1 go in together, then its error comes back.
  absl::Status s = Submit({Cached(id, 0), Cached(id, 1), Cached(id, 2)}, nullptr, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "not 2");
  std::vector<PendingTensor> pending = negotiation_.Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].missing_ranks, std::vector<int>{2});
  // A malformed request is a protocol violation.
  TensorRequest bad = Allreduce("", 0);
  EXPECT_FALSE(Submit({bad}).ok());
}

TEST_F(JobNegotiationTest, ObserversHearEachSetsReadyTensorsTheirBytesAndWhatIsSent) {
  const int a = AddSet({1, 2});
  ASSERT_GT(a, 0);
  recorder_ = Recorder{};
  for (int r : {1, 2}) ASSERT_TRUE(Submit({Allreduce("h", r, a)}).ok());
  for (int r = 0; r < kSize; ++r) ASSERT_TRUE(Submit({Allreduce("g", r)}).ok());
  std::vector<Response> responses = Flush();
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].process_set, a) << "other sets first";
  EXPECT_THAT(recorder_.ready, ElementsAre(Pair(0, "g"), Pair(a, "h")));
  EXPECT_EQ(recorder_.allreduce_bytes, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(recorder_.fusion_threshold, NoHold().fusion_threshold_bytes);
  EXPECT_EQ(recorder_.sent, 2);
  // Set 0 is told even when nothing became ready (the autotuner acts on reports too).
  Flush();
  EXPECT_EQ(recorder_.ready.back(), std::make_pair(0, std::string()));
  // The options observers tune are set 0's, and its threshold is what bytes are held against.
  NegotiatorOptions tuned = negotiation_.options();
  tuned.fusion_threshold_bytes = 1024;
  negotiation_.set_options(tuned);
  Negotiate("k");
  EXPECT_EQ(recorder_.fusion_threshold, 1024);
}

TEST_F(JobNegotiationTest, ATensorForAnUnknownSetFailsForTheSubmittingSessionAlone) {
  DownMessage misses;
  ASSERT_TRUE(Submit({Allreduce("h", 0, 5)}, &misses).ok());
  ASSERT_EQ(misses.responses.size(), 1u);
  EXPECT_THAT(misses.responses[0].error, HasSubstr("there is no process set 5"));
  EXPECT_TRUE(Flush().empty());
}

TEST_F(JobNegotiationTest, ARankThatLeavesFailsItsTensorsInEverySet) {
  const int a = AddSet({0, 2});
  ASSERT_TRUE(Submit({Allreduce("g", 0), Allreduce("h", 0, a)}).ok());
  EXPECT_EQ(negotiation_.NegotiatedPending().size(), 2u);
  negotiation_.RemoveRank(2, "has shut down");
  std::vector<Response> responses = Flush();
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_THAT(responses[0].error, HasSubstr("(global rank 2) has shut down"));
  EXPECT_THAT(responses[1].error, HasSubstr("rank 2 has shut down"));
  EXPECT_FALSE(negotiation_.has_pending());
}

TEST_F(JobNegotiationTest, IdsStartAboveThoseAnEarlierCoordinatorHandedOut) {
  negotiation_.ReserveIdsThrough(500, 7);
  EXPECT_GT(Negotiate("g"), 500);
}

class JobNegotiationScheduleTest : public JobNegotiationTest {
 protected:
  JobNegotiationScheduleTest() : JobNegotiationTest(ScheduleOptions{.enabled = true}) {}

  // Steps of x and y, by cache id once known, until a schedule is published.
  std::optional<Schedule> StepUntilPublished(bool job_ready = true) {
    std::map<std::string, int32_t> ids;
    for (int step = 0; step < 10; ++step) {
      for (const std::string name : {"x", "y"}) {
        for (int r = 0; r < kSize; ++r) {
          EXPECT_TRUE(Submit({ids.count(name) ? Cached(ids[name], r) : Allreduce(name, r)}).ok());
        }
        for (const Response& response : Flush()) ids[name] = response.cache_ids.at(0);
      }
      negotiation_.MaybePublishSchedule([&] { return job_ready; });
      for (const DownMessage& m : broadcast_) {
        if (m.schedule) {
          ids_ = ids;
          return m.schedule;
        }
      }
    }
    return std::nullopt;
  }

  std::map<std::string, int32_t> ids_;
};

TEST_F(JobNegotiationScheduleTest, AScheduleWaitsUntilTheJobCanTakeOne) {
  EXPECT_FALSE(StepUntilPublished(/*job_ready=*/false));
  negotiation_.MaybePublishSchedule([] { return true; });
  ASSERT_EQ(broadcast_.size(), 1u);
  EXPECT_TRUE(broadcast_[0].schedule);
}

TEST_F(JobNegotiationScheduleTest, AScheduleWaitsWhileATensorIsPendingWithoutAskingTheJob) {
  EXPECT_FALSE(StepUntilPublished(/*job_ready=*/false));
  ASSERT_TRUE(Submit({Allreduce("z", 0)}).ok());
  negotiation_.MaybePublishSchedule([] {
    ADD_FAILURE() << "asked while negotiation is busy";
    return true;
  });
  EXPECT_TRUE(broadcast_.empty());
}

TEST_F(JobNegotiationScheduleTest, ScheduledRequestsAreDroppedAndRoundsAreToldAsSetZeroTensors) {
  std::optional<Schedule> schedule = StepUntilPublished();
  ASSERT_TRUE(schedule) << "no schedule formed";
  // Ranks that had sent x before they had the schedule: dropped, not negotiated.
  ASSERT_TRUE(Submit({Cached(ids_["x"], 0), Cached(ids_["x"], 1)}).ok());
  EXPECT_FALSE(negotiation_.has_pending());
  recorder_ = Recorder{};
  const size_t entries = schedule->entries.size();
  for (int r = 0; r < kSize; ++r) {
    ScheduleProgress p;
    p.schedule = schedule->id;
    p.submitted_ago = {absl::Milliseconds(3), absl::Milliseconds(2)};
    p.completed_ago.assign(entries, absl::Milliseconds(1));
    if (r == 0) p.waiting.push_back({0, 1, absl::Seconds(1)});
    bool waiting = false;
    ASSERT_TRUE(negotiation_.RecordScheduleProgress(r, p, kT0, kT0, &waiting).ok());
    EXPECT_EQ(waiting, r == 0);
  }
  EXPECT_THAT(recorder_.ready, ElementsAre(Pair(0, "x,y")));
  EXPECT_EQ(recorder_.allreduce_bytes.size(), entries);
  // What rank 0 waits for is pending, but not as negotiation's.
  ASSERT_EQ(negotiation_.Pending().size(), 1u);
  EXPECT_EQ(negotiation_.Pending()[0].missing_ranks, (std::vector<int>{1, 2}));
  EXPECT_TRUE(negotiation_.NegotiatedPending().empty());
  // Every rank leaves: the schedule ends, and their requests are negotiated again.
  for (int r = 0; r < kSize; ++r) negotiation_.RemoveRank(r, "has shut down");
  EXPECT_EQ(negotiation_.schedules().Info().active, 0);
  EXPECT_EQ(negotiation_.schedules().Info().ended, 1);
}

}  // namespace
}  // namespace troika::coordinator
