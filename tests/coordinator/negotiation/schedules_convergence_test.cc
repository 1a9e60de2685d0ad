// Schedules converge on the grouping the ranks' reports permit, whatever grouping negotiation
// happened to make of the step a schedule was taken from (docs/design/schedules.md, Buckets):
// negotiation's groupings and the ranks' reports are the test's, over a real set-0 Negotiator
// of 2 ranks, with no clock but the one the test passes and no threads.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/negotiation/schedules.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::kT0;
using test_util::NoHold;
using test_util::PollNow;

constexpr int kSize = 2;

// The tensors of one response, in order; a step is a list of them.
using Grouping = std::vector<std::vector<std::string>>;
// Neighbouring tensors (before, after) between whose submissions a rank saw a completion.
using Waits = std::set<std::pair<std::string, std::string>>;

// Steps of allreduces "t0".."t3" (4 floats each). Every rank submits a response's tensors
// before the coordinator polls, so they go as that one response; the job is idle after each
// response and may take a schedule there, as Job offers one after every flush.
class SchedulesConvergenceTest : public ::testing::Test {
 protected:
  SchedulesConvergenceTest()
      : schedules_("train", kSize, ScheduleOptions{.enabled = true}, whole_job_,
                   [this](std::shared_ptr<const DownMessage> m) { sent_.push_back(*m); }) {}

  // Negotiates `response`'s tensors as one response, then offers a publication.
  void Negotiate(const std::vector<std::string>& response) {
    for (const std::string& name : response) {
      for (int rank = 0; rank < kSize; ++rank) {
        if (ids_.count(name)) {
          ASSERT_TRUE(whole_job_.SubmitCached(rank, ids_[name], now_).ok());
        } else {
          ASSERT_TRUE(whole_job_.Submit(test_util::Allreduce(name, rank), now_).ok());
        }
      }
    }
    std::vector<Response> responses = PollNow(whole_job_, now_);
    ASSERT_EQ(responses.size(), 1u);
    ASSERT_EQ(responses[0].names, response) << "negotiation grouped otherwise";
    for (size_t i = 0; i < response.size(); ++i) ids_[response[i]] = responses[0].cache_ids[i];
    schedules_.OnSending(responses, now_);
    now_ += absl::Milliseconds(1);
    schedules_.MaybePublish();
  }

  // Steps negotiated as `step` until a schedule is published (at most 10 steps); returns it.
  std::optional<Schedule> StepUntilPublished(const Grouping& step) {
    for (int s = 0; s < 10; ++s) {
      for (const std::vector<std::string>& response : step) {
        const size_t before = sent_.size();
        Negotiate(response);
        for (size_t i = before; i < sent_.size(); ++i) {
          if (sent_[i].schedule) return sent_[i].schedule;
        }
      }
    }
    return std::nullopt;
  }

  // Every rank reports the rounds the coordinator learns from, having seen a completion
  // between the neighbouring tensors `waits` names (in the schedule's order, the last with
  // the next round's first).
  void Learn(const Schedule& schedule, const Waits& waits) {
    std::vector<std::string> names;
    for (const Response& entry : schedule.entries) {
      names.insert(names.end(), entry.names.begin(), entry.names.end());
    }
    ScheduleProgress p;
    p.schedule = schedule.id;
    p.submitted_ago.assign(Schedules::kLearnRounds * names.size(), absl::Milliseconds(2));
    p.completed_ago.assign(Schedules::kLearnRounds * schedule.entries.size(),
                           absl::Milliseconds(1));
    for (size_t n = 0; n < names.size(); ++n) {
      if (waits.count({names[n], names[(n + 1) % names.size()]})) {
        p.cut_after.push_back(static_cast<int32_t>(n));
      }
    }
    for (int rank = 0; rank < kSize; ++rank) {
      Schedules::Rounds rounds;
      ASSERT_TRUE(schedules_.Progress(rank, p, now_, &rounds).ok());
    }
  }

  bool Revoked(const Schedule& schedule) const {
    for (const DownMessage& m : sent_) {
      if (m.end_schedule == schedule.id) return true;
    }
    return false;
  }

  // The schedule's entries, by name.
  static Grouping EntriesOf(const Schedule& schedule) {
    Grouping entries;
    for (const Response& entry : schedule.entries) entries.push_back(entry.names);
    return entries;
  }

  Negotiator whole_job_{kSize, NoHold()};
  std::vector<DownMessage> sent_;  // what every session was told
  Schedules schedules_;
  std::map<std::string, int32_t> ids_;
  absl::Time now_ = kT0;
};

// Each step: t0, t1, a wait for t1, t2, t3, and a wait for the step's results before the
// next step's t0.
const Waits kWaitAfterT1 = {{"t1", "t2"}, {"t3", "t0"}};

// A schedule of a response per tensor learns that t0 with t1 and t2 with t3 may share a
// collective, and gives way. Negotiation then groups each step as 3 responses (t0 and t1
// were ready together), and the detector finds that period after a t2: a schedule copied from
// there would end between t2 and t3 and run 3 collectives for good. The job settles on 2.
TEST_F(SchedulesConvergenceTest, AStepNegotiatedAsThreeResponsesSettlesOnTheTwoCollectivesAllowed) {
  std::optional<Schedule> first = StepUntilPublished({{"t0"}, {"t1"}, {"t2"}, {"t3"}});
  ASSERT_TRUE(first) << "no schedule formed";
  ASSERT_EQ(first->entries.size(), 4u);
  Learn(*first, kWaitAfterT1);
  ASSERT_TRUE(Revoked(*first)) << "its 4 responses can run as 2 collectives";
  schedules_.End(first->id, {0, 1});

  // The step the schedule ended in goes on under negotiation (t3 was still to come), and the
  // later steps come as 3 responses.
  Negotiate({"t3"});
  std::optional<Schedule> schedule;
  for (int published = 0; published < 4; ++published) {
    schedule = StepUntilPublished({{"t0", "t1"}, {"t2"}, {"t3"}});
    ASSERT_TRUE(schedule) << "no schedule formed after schedule " << published + 1;
    Learn(*schedule, kWaitAfterT1);
    if (!Revoked(*schedule)) break;  // it holds
    schedules_.End(schedule->id, {0, 1});
  }
  const Grouping settled = EntriesOf(*schedule);
  EXPECT_EQ(settled, (Grouping{{"t0", "t1"}, {"t2", "t3"}}))
      << "settled on " << settled.size() << " collectives";
  EXPECT_FALSE(Revoked(*schedule));
  EXPECT_EQ(schedules_.Info().active, schedule->id);
}

// A bucketed schedule learns too: the steps' order changed (t3 now before t2), so the job knew
// only that t0 and t1 may share a collective; the schedule's reports show that t3 and t2 may
// as well, and it gives way to one of 2 collectives.
TEST_F(SchedulesConvergenceTest, ABucketedScheduleGivesWayWhenItsReportsPermitFewerCollectives) {
  std::optional<Schedule> first = StepUntilPublished({{"t0"}, {"t1"}, {"t2"}, {"t3"}});
  ASSERT_TRUE(first);
  Learn(*first, kWaitAfterT1);
  ASSERT_TRUE(Revoked(*first));
  schedules_.End(first->id, {0, 1});

  const Grouping swapped = {{"t0"}, {"t1"}, {"t3"}, {"t2"}};
  const Waits waits = {{"t1", "t3"}, {"t2", "t0"}};
  std::optional<Schedule> bucketed = StepUntilPublished(swapped);
  ASSERT_TRUE(bucketed);
  ASSERT_EQ(EntriesOf(*bucketed), (Grouping{{"t0", "t1"}, {"t3"}, {"t2"}}));
  Learn(*bucketed, waits);
  ASSERT_TRUE(Revoked(*bucketed)) << "t3 and t2 may share a collective";
  schedules_.End(bucketed->id, {0, 1});

  std::optional<Schedule> settled = StepUntilPublished(swapped);
  ASSERT_TRUE(settled);
  EXPECT_EQ(EntriesOf(*settled), (Grouping{{"t0", "t1"}, {"t3", "t2"}}));
  Learn(*settled, waits);
  EXPECT_FALSE(Revoked(*settled)) << "nothing fewer to give way to";
}

}  // namespace
}  // namespace troika::coordinator
