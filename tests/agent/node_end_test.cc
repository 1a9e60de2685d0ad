// NodeEnd and Reformation: why a node ends (first cause kept) and what ranks asking to attach
// again hear; a job forming anew, its rounds told apart.

#include "agent/node/node_end.h"

#include "agent/node/reformation.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

std::shared_ptr<const DownMessage> Abort(const std::string& reason) {
  auto down = std::make_shared<DownMessage>();
  down->abort_reason = reason;
  return down;
}

TEST(NodeEndTest, TheFirstAbortIsKeptAndAnEndedNodeIsNotLostAfterwards) {
  NodeEnd end;
  EXPECT_FALSE(end.stopping());
  EXPECT_TRUE(end.Refusal().ok());
  end.Aborted(Abort("first"));
  end.Aborted(Abort("second"));
  EXPECT_EQ(end.abort()->abort_reason, "first");
  EXPECT_FALSE(end.Lost("the coordinator went")) << "already ending: aborted";
  EXPECT_TRUE(end.lost().empty());
  EXPECT_TRUE(end.stopping());
  EXPECT_TRUE(end.aborted_or_closing());
  EXPECT_EQ(end.Refusal().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(end.Refusal().message(), "first");
}

TEST(NodeEndTest, EachCauseHasItsRefusal) {
  NodeEnd lost;
  EXPECT_TRUE(lost.Lost("gone"));
  EXPECT_FALSE(lost.Lost("again"));
  EXPECT_EQ(lost.lost(), "gone");
  EXPECT_TRUE(lost.stopping());
  EXPECT_FALSE(lost.aborted_or_closing()) << "a lost node still retries nothing by itself";
  EXPECT_EQ(lost.Refusal().code(), absl::StatusCode::kUnavailable);

  NodeEnd refused;
  refused.AttachRefused("no room");
  EXPECT_FALSE(refused.stopping());
  EXPECT_EQ(refused.Refusal().code(), absl::StatusCode::kFailedPrecondition);

  NodeEnd closing;
  closing.Close();
  EXPECT_TRUE(closing.stopping());
  EXPECT_FALSE(closing.Lost("late")) << "a closing agent is not lost";
  EXPECT_EQ(closing.Refusal().code(), absl::StatusCode::kCancelled);
}

Membership Member(int rank, int64_t epoch) {
  Membership m;
  m.rank = rank;
  m.epoch = epoch;
  return m;
}

TEST(ReformationTest, CompleteOnceEveryRankOfTheNodeAttachedInLabelOrder) {
  Reformation r;
  r.Start({2, 3});
  const Reformation::Ask first = r.Asked();
  EXPECT_TRUE(first.began);
  EXPECT_FALSE(r.Asked().began) << "the second rank joins the same re-formation";
  std::vector<Membership> all;
  EXPECT_EQ(r.Answered(first.id, std::vector<Membership>{Member(3, 5)}, &all),
            Reformation::Outcome::kWaiting);
  EXPECT_EQ(r.Answered(first.id, std::vector<Membership>{Member(2, 5)}, &all),
            Reformation::Outcome::kComplete);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rank, 2);
  EXPECT_EQ(all[1].rank, 3);
  EXPECT_FALSE(r.in_progress());
  r.Hold(all);
  EXPECT_EQ(r.TakeHeld().size(), 2u);
  EXPECT_TRUE(r.TakeHeld().empty());
}

TEST(ReformationTest, AFailureEndsItAndLateAnswersOfAnEndedOneAreStale) {
  Reformation r;
  r.Start({0, 1});
  const uint64_t id = r.Asked().id;
  std::vector<Membership> all;
  EXPECT_EQ(r.Answered(id, absl::AbortedError("aborted"), &all), Reformation::Outcome::kFailed);
  EXPECT_EQ(r.Answered(id, std::vector<Membership>{Member(0, 2)}, &all),
            Reformation::Outcome::kStale);
  const Reformation::Ask next = r.Asked();
  EXPECT_TRUE(next.began);
  EXPECT_NE(next.id, id);
  EXPECT_EQ(r.Answered(id, std::vector<Membership>{Member(0, 2)}, &all),
            Reformation::Outcome::kStale)
      << "an answer for the given-up round does not count for the next";
}

}  // namespace
}  // namespace troika::agent
