#include "agent/relay/aggregator.h"

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TensorRequest Request(int rank, const std::string& name, std::vector<int64_t> shape = {4},
                      CollectiveType type = CollectiveType::kAllreduce) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.type = type;
  r.shape = std::move(shape);
  return r;
}

// One forwarded wire request, as the coordinator sees it.
struct Forwarded {
  std::string name;
  std::vector<int> ranks;  // empty: a plain request of `rank`
  int rank = 0;
  std::vector<int64_t> dim0s;
};

std::vector<Forwarded> Unpack(const v1::RequestBatch& batch) {
  std::vector<Forwarded> out;
  for (const v1::Request& r : batch.requests()) {
    out.push_back({r.name(),
                   {r.ranks().begin(), r.ranks().end()},
                   r.rank(),
                   {r.dim0s().begin(), r.dim0s().end()}});
  }
  return out;
}

// What the coordinator makes of the batch: one request per rank.
std::vector<std::pair<std::string, int>> PerRank(const v1::RequestBatch& batch) {
  std::vector<TensorRequest> requests;
  for (const v1::Request& r : batch.requests()) EXPECT_TRUE(AppendFromWire(r, &requests).ok());
  std::vector<std::pair<std::string, int>> out;
  for (const TensorRequest& r : requests) out.emplace_back(r.name, r.rank);
  return out;
}

class AggregatorTest : public ::testing::Test {
 protected:
  // Node of ranks 2 and 3, a 2 ms window.
  Aggregator aggregator_{{2, 3}, absl::Milliseconds(2)};
  FakeClock clock_;
};

TEST_F(AggregatorTest, TensorGoesUpstreamAsOneRequestOnceEveryLocalRankSubmittedIt) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "grad")}, clock_.Now(), &out).ok());
  EXPECT_EQ(out.requests_size(), 0);
  EXPECT_EQ(aggregator_.waiting(), 1);
  ASSERT_TRUE(aggregator_.Add({Request(3, "grad")}, clock_.Now(), &out).ok());
  ASSERT_EQ(out.requests_size(), 1);
  EXPECT_THAT(out.requests(0).ranks(), ElementsAre(2, 3));
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 2},
                                        std::pair<std::string, int>{"grad", 3}));
  EXPECT_EQ(aggregator_.waiting(), 0);
  EXPECT_EQ(aggregator_.NextDeadline(), absl::InfiniteFuture());
}

TEST_F(AggregatorTest, PartialArrivalsGoUpstreamWhenTheWindowEndsAndLateRanksFollowAlone) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "grad")}, clock_.Now(), &out).ok());
  EXPECT_EQ(aggregator_.NextDeadline(), clock_.Now() + absl::Milliseconds(2));
  clock_.Advance(absl::Microseconds(1999));
  aggregator_.Expire(clock_.Now(), &out);
  EXPECT_EQ(out.requests_size(), 0) << "the window has not ended";
  clock_.Advance(absl::Microseconds(1));
  aggregator_.Expire(clock_.Now(), &out);
  ASSERT_EQ(out.requests_size(), 1);
  EXPECT_THAT(out.requests(0).ranks(), IsEmpty());
  EXPECT_EQ(out.requests(0).rank(), 2);
  EXPECT_EQ(aggregator_.NextDeadline(), absl::InfiniteFuture());

  v1::RequestBatch late;
  ASSERT_TRUE(aggregator_.Add({Request(3, "grad")}, clock_.Now(), &late).ok());
  EXPECT_THAT(PerRank(late), ElementsAre(std::pair<std::string, int>{"grad", 3}))
      << "rank 2's request is never forwarded twice";
  EXPECT_EQ(aggregator_.waiting(), 0);
}

// Rank 3 submits grad (waiting for rank 2) and then joins: grad goes upstream before the
// join, not after the window; ahead of it, the join would make rank 3 a joined rank for grad.
TEST_F(AggregatorTest, AJoinFollowsItsRanksWaitingRequestsUpstream) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_
                  .Add({Request(3, "grad"), Request(3, kJoinTensorName, {}, CollectiveType::kJoin)},
                       clock_.Now(), &out)
                  .ok());
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 3}));
  EXPECT_EQ(aggregator_.waiting(), 1) << "the join waits for rank 2's";
  ASSERT_TRUE(
      aggregator_.Add({Request(2, kJoinTensorName, {}, CollectiveType::kJoin)}, clock_.Now(), &out)
          .ok());
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 3},
                                        std::pair<std::string, int>{kJoinTensorName, 3},
                                        std::pair<std::string, int>{kJoinTensorName, 2}));
}

TEST_F(AggregatorTest, WindowEndingDuringAnAddFlushesOlderTensors) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "a")}, clock_.Now(), &out).ok());
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(aggregator_.Add({Request(2, "b")}, clock_.Now(), &out).ok());
  ASSERT_EQ(out.requests_size(), 1);
  EXPECT_EQ(out.requests(0).name(), "a");
  EXPECT_EQ(aggregator_.NextDeadline(), clock_.Now() + absl::Milliseconds(2));
}

TEST_F(AggregatorTest, RequestsThatDisagreeGoUpstreamOneByOneSoTheCoordinatorNamesTheMismatch) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "grad", {4})}, clock_.Now(), &out).ok());
  ASSERT_TRUE(aggregator_.Add({Request(3, "grad", {5})}, clock_.Now(), &out).ok());
  ASSERT_EQ(out.requests_size(), 2);
  EXPECT_THAT(out.requests(0).ranks(), IsEmpty());
  EXPECT_THAT(out.requests(0).shape(), ElementsAre(4));
  EXPECT_THAT(out.requests(1).shape(), ElementsAre(5));
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 2},
                                        std::pair<std::string, int>{"grad", 3}));
}

TEST_F(AggregatorTest, AllgathersWithDifferentFirstDimensionsAreStillCompacted) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_
                  .Add({Request(3, "g", {7, 2}, CollectiveType::kAllgather),
                        Request(2, "g", {1, 2}, CollectiveType::kAllgather)},
                       clock_.Now(), &out)
                  .ok());
  std::vector<Forwarded> sent = Unpack(out);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(sent[0].ranks, ElementsAre(3, 2));
  EXPECT_THAT(sent[0].dim0s, ElementsAre(7, 1));
}

TEST_F(AggregatorTest, TensorsKeepTheirOrderWithinABatch) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "b"), Request(2, "a")}, clock_.Now(), &out).ok());
  ASSERT_TRUE(aggregator_.Add({Request(3, "b"), Request(3, "a")}, clock_.Now(), &out).ok());
  ASSERT_EQ(out.requests_size(), 2);
  EXPECT_EQ(out.requests(0).name(), "b");
  EXPECT_EQ(out.requests(1).name(), "a");
}

TEST_F(AggregatorTest, NameSubmittedTwiceWhileWaitingIsRefusedAndNothingIsTaken) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({Request(2, "grad")}, clock_.Now(), &out).ok());
  absl::Status s = aggregator_.Add({Request(2, "other"), Request(2, "grad")}, clock_.Now(), &out);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(aggregator_.waiting(), 1) << "'other' was not taken either";
  EXPECT_TRUE(absl::IsAlreadyExists(
      aggregator_.Add({Request(3, "x"), Request(3, "x")}, clock_.Now(), &out)));
}

TEST_F(AggregatorTest, RankLeavingReleasesTensorsThatWaitedOnlyForIt) {
  Aggregator aggregator({0, 1, 2}, absl::Hours(1));
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator.Add({Request(0, "grad"), Request(1, "grad")}, clock_.Now(), &out).ok());
  EXPECT_EQ(out.requests_size(), 0);
  aggregator.RemoveRank(2, &out);
  ASSERT_EQ(out.requests_size(), 1);
  EXPECT_THAT(out.requests(0).ranks(), ElementsAre(0, 1));
}

TEST_F(AggregatorTest, LeavingRanksWaitingRequestsGoUpstreamAtOnce) {
  Aggregator aggregator({0, 1, 2}, absl::Hours(1));
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator.Add({Request(0, "grad"), Request(1, "grad")}, clock_.Now(), &out).ok());
  aggregator.RemoveRank(0, &out);
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 0},
                                        std::pair<std::string, int>{"grad", 1}));
  v1::RequestBatch later;
  ASSERT_TRUE(aggregator.Add({Request(2, "grad")}, clock_.Now(), &later).ok());
  EXPECT_THAT(PerRank(later), ElementsAre(std::pair<std::string, int>{"grad", 2}));
  EXPECT_EQ(aggregator.waiting(), 0);
}

TEST_F(AggregatorTest, RequestOfARankThatLeftIsPassedOnAlone) {
  v1::RequestBatch out;
  aggregator_.RemoveRank(3, &out);
  ASSERT_TRUE(aggregator_.Add({Request(3, "grad")}, clock_.Now(), &out).ok());
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 3}));
  EXPECT_EQ(aggregator_.waiting(), 0);
}

TEST_F(AggregatorTest, ZeroWindowForwardsWhateverArrivedAtOnce) {
  Aggregator aggregator({0, 1}, absl::ZeroDuration());
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator.Add({Request(0, "grad")}, clock_.Now(), &out).ok());
  EXPECT_THAT(PerRank(out), ElementsAre(std::pair<std::string, int>{"grad", 0}));
  ASSERT_TRUE(aggregator.Add({Request(0, "a"), Request(1, "a")}, clock_.Now(), &out).ok());
  EXPECT_EQ(out.requests_size(), 2);
  EXPECT_THAT(out.requests(1).ranks(), ElementsAre(0, 1)) << "arrived together: compacted";
}

TEST_F(AggregatorTest, SameNameAfterCompletionStartsAFreshTensor) {
  for (int step = 0; step < 3; ++step) {
    v1::RequestBatch out;
    ASSERT_TRUE(aggregator_.Add({Request(2, "grad")}, clock_.Now(), &out).ok());
    ASSERT_TRUE(aggregator_.Add({Request(3, "grad")}, clock_.Now(), &out).ok());
    ASSERT_EQ(out.requests_size(), 1) << "step " << step;
    EXPECT_THAT(out.requests(0).ranks(), ElementsAre(2, 3));
  }
}

}  // namespace
}  // namespace troika::agent

namespace troika::agent {
namespace {

TensorRequest InSet(int rank, const std::string& name, int set) {
  TensorRequest r = Request(rank, name);
  r.process_set = set;
  return r;
}

TEST_F(AggregatorTest, SameNameInTwoSetsIsTwoTensors) {
  v1::RequestBatch out;
  ASSERT_TRUE(aggregator_.Add({InSet(2, "same", 1), InSet(2, "same", 2)}, clock_.Now(), &out).ok());
  EXPECT_EQ(aggregator_.waiting(), 2);
  ASSERT_TRUE(aggregator_.Add({InSet(3, "same", 1), InSet(3, "same", 2)}, clock_.Now(), &out).ok());
  EXPECT_EQ(aggregator_.waiting(), 0);
  ASSERT_EQ(out.requests_size(), 2);  // one compacted request per set
  EXPECT_EQ(out.requests(0).process_set(), 1);
  EXPECT_EQ(out.requests(1).process_set(), 2);
  EXPECT_THAT(Unpack(out)[0].ranks, ElementsAre(2, 3));
  // A name twice in one set is still refused.
  EXPECT_EQ(aggregator_.Add({InSet(2, "x", 1), InSet(2, "x", 1)}, clock_.Now(), &out).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(AggregatorTest, SetMembersAreAllThatIsWaitedFor) {
  v1::RequestBatch out;
  // Before the set's members are known, rank 3 is waited for until the window ends.
  ASSERT_TRUE(aggregator_.Add({InSet(2, "a", 5)}, clock_.Now(), &out).ok());
  EXPECT_EQ(out.requests_size(), 0);
  // Set 5 is {0, 2}: rank 2 alone is this node's member, so "a" goes now.
  aggregator_.SetMembers(5, {0, 2}, &out);
  ASSERT_EQ(out.requests_size(), 1);
  EXPECT_EQ(aggregator_.waiting(), 0);
  EXPECT_EQ(aggregator_.NextDeadline(), absl::InfiniteFuture());
  // Later tensors of the set go at once, every time (nothing is left behind per name).
  for (int i = 0; i < 3; ++i) {
    v1::RequestBatch next;
    ASSERT_TRUE(aggregator_.Add({InSet(2, "a", 5)}, clock_.Now(), &next).ok());
    EXPECT_EQ(next.requests_size(), 1);
  }
  EXPECT_EQ(aggregator_.NextDeadline(), absl::InfiniteFuture());
  // A removed set's waiting tensors go upstream for the coordinator to fail.
  aggregator_.SetMembers(6, {2, 3}, &out);
  v1::RequestBatch removed;
  ASSERT_TRUE(aggregator_.Add({InSet(2, "b", 6)}, clock_.Now(), &removed).ok());
  EXPECT_EQ(removed.requests_size(), 0);
  aggregator_.RemoveSet(6, &removed);
  EXPECT_EQ(removed.requests_size(), 1);
  EXPECT_EQ(aggregator_.waiting(), 0);
}

}  // namespace
}  // namespace troika::agent
