// Negotiator: grouped operations (held until the group is complete, released together, fused)
// and join (a joined rank counts as having submitted every tensor).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/negotiation/negotiator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using test_util::kT0;
using test_util::NoHold;
using test_util::PollNow;

TensorRequest Request(int rank, std::string name, CollectiveType type = CollectiveType::kAllreduce,
                      std::vector<int64_t> shape = {4}) {
  TensorRequest r;
  r.rank = rank;
  r.name = std::move(name);
  r.type = type;
  r.dtype = DataType::kFloat32;
  r.shape = std::move(shape);
  return r;
}

TensorRequest Grouped(int rank, std::string name, std::string group, int group_size) {
  TensorRequest r = Request(rank, std::move(name));
  r.group = std::move(group);
  r.group_size = group_size;
  return r;
}

TensorRequest Join(int rank) {
  TensorRequest r;
  r.rank = rank;
  r.name = kJoinTensorName;
  r.type = CollectiveType::kJoin;
  r.dtype = DataType::kUint8;
  return r;
}

void SubmitOnRanks(Negotiator& n, const std::vector<int>& ranks,
                   const std::function<TensorRequest(int)>& make) {
  for (int r : ranks) ASSERT_TRUE(n.Submit(make(r), kT0).ok()) << "rank " << r;
}

std::vector<std::string> AllNames(const std::vector<Response>& out) {
  std::vector<std::string> names;
  for (const Response& r : out) names.insert(names.end(), r.names.begin(), r.names.end());
  return names;
}

TEST(NegotiatorGroupTest, GroupedTensorIsHeldUntilItsWholeGroupIsReady) {
  Negotiator n(2, NoHold());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/a", "g", 2); });
  EXPECT_THAT(PollNow(n), IsEmpty());
  EXPECT_FALSE(n.idle());
  // Held, not lost: it is pending, missing nobody yet (no other tensor of the group arrived).
  ASSERT_EQ(n.Pending().size(), 1u);
  EXPECT_EQ(n.Pending()[0].name, "g/a");
  ASSERT_TRUE(n.Submit(Grouped(0, "g/b", "g", 2), kT0).ok());
  EXPECT_THAT(PollNow(n), IsEmpty());
  ASSERT_EQ(n.Pending().size(), 2u);
  for (const PendingTensor& p : n.Pending()) EXPECT_THAT(p.missing_ranks, ElementsAre(1));
  ASSERT_TRUE(n.Submit(Grouped(1, "g/b", "g", 2), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("g/a", "g/b"));
  EXPECT_TRUE(n.idle());
}

TEST(NegotiatorGroupTest, GroupedAllgathersAndReducescattersAreHeldAndReleasedTogether) {
  for (CollectiveType type : {CollectiveType::kAllgather, CollectiveType::kReducescatter}) {
    Negotiator n(2, NoHold());
    auto grouped = [type](int rank, const std::string& name) {
      TensorRequest r = Grouped(rank, name, "g", 2);
      r.type = type;
      return r;
    };
    SubmitOnRanks(n, {0, 1}, [&](int r) { return grouped(r, "g/a"); });
    EXPECT_THAT(PollNow(n), IsEmpty()) << static_cast<int>(type);
    SubmitOnRanks(n, {0, 1}, [&](int r) { return grouped(r, "g/b"); });
    std::vector<Response> out = PollNow(n);
    EXPECT_THAT(AllNames(out), ElementsAre("g/a", "g/b")) << static_cast<int>(type);
    for (const Response& r : out) {
      EXPECT_EQ(r.type, type);
      EXPECT_FALSE(r.is_error()) << r.error;
    }
    EXPECT_TRUE(n.idle());
  }
}

TEST(NegotiatorGroupTest, CompleteGroupIsReleasedContiguouslyInReadinessOrder) {
  NegotiatorOptions options = NoHold();
  options.fusion_threshold_bytes = 0;  // one response per tensor, to see the order
  Negotiator n(2, options);
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/2", "g", 3); });
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "other"); });
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/0", "g", 3); });
  EXPECT_THAT(AllNames(PollNow(n)), ElementsAre("other"));
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/1", "g", 3); });
  EXPECT_THAT(AllNames(PollNow(n)), ElementsAre("g/2", "g/0", "g/1"));
  // The name is free again: the next step's group is a new one.
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/0", "g", 3); });
  EXPECT_THAT(PollNow(n), IsEmpty());
}

TEST(NegotiatorGroupTest, GroupOfFiftySmallAllreducesIsOneFusedResponseAndNotHeld) {
  Negotiator n(4, NegotiatorOptions{});  // default cycle time and threshold
  // An unrelated allreduce still being submitted would hold a lone ready allreduce back.
  ASSERT_TRUE(n.Submit(Request(0, "partial"), kT0).ok());
  std::vector<std::string> expected;
  for (int i = 0; i < 50; ++i) {
    const std::string name = absl::StrCat("grad/", i);
    expected.push_back(name);
    SubmitOnRanks(n, {0, 1, 2, 3}, [&](int r) { return Grouped(r, name, "step", 50); });
  }
  absl::Time next;
  std::vector<Response> out = n.Poll(kT0, &next);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].is_error()) << out[0].error;
  EXPECT_EQ(out[0].names, expected);
  EXPECT_EQ(next, absl::InfiniteFuture());
}

TEST(NegotiatorGroupTest, TensorBeyondTheGroupSizeFails) {
  Negotiator n(2, NoHold());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/a", "g", 2); });
  ASSERT_TRUE(n.Submit(Grouped(0, "g/b", "g", 2), kT0).ok());
  ASSERT_TRUE(n.Submit(Grouped(0, "g/c", "g", 2), kT0).ok());  // the third of two
  ASSERT_TRUE(n.Submit(Grouped(1, "g/c", "g", 2), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("g/c"));
  EXPECT_THAT(out[0].error, HasSubstr("Group 'g' has more than 2 tensors: 'g/c' is one too many"));
  ASSERT_TRUE(n.Submit(Grouped(1, "g/b", "g", 2), kT0).ok());
  out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("g/a", "g/b"));
  EXPECT_FALSE(out[0].is_error());
}

TEST(NegotiatorGroupTest, RanksDisagreeingOnTheGroupFailTheTensorAndTheGroupCompletes) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Grouped(0, "g/a", "g", 2), kT0).ok());
  ASSERT_TRUE(n.Submit(Grouped(1, "g/a", "h", 2), kT0).ok());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/b", "g", 2); });
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].error,
            "Mismatched allreduce groups for 'g/a': rank 0 sent group 'g' of 2, rank 1 sent "
            "group 'h' of 2");
  EXPECT_THAT(out[1].names, ElementsAre("g/b"));
  EXPECT_FALSE(out[1].is_error());
  EXPECT_TRUE(n.idle());
}

TEST(NegotiatorGroupTest, DepartedRankFailsHeldGroups) {
  Negotiator n(2, NoHold());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Grouped(r, "g/a", "g", 2); });
  n.RemoveRank(1, "has shut down");
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].error, HasSubstr("'g/a' can never complete: rank 1 has shut down"));
  EXPECT_TRUE(n.idle());
}

TEST(NegotiatorJoinTest, TensorIsReadyWithoutJoinedRankAndSaysWhoJoined) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Join(2), kT0).ok());
  SubmitOnRanks(n, {0, 1}, [](int r) {
    return Request(r, "a", CollectiveType::kAllreduce, {2, 3});
  });
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "b", CollectiveType::kAllreduce, {5}); });
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);  // fused: both have the same joined ranks
  EXPECT_FALSE(out[0].is_error()) << out[0].error;
  EXPECT_THAT(out[0].names, ElementsAre("a", "b"));
  EXPECT_THAT(out[0].joined_ranks, ElementsAre(2));
  EXPECT_THAT(out[0].elements, ElementsAre(6, 5));
  EXPECT_TRUE(out[0].cache_ids.empty());
  // The join itself waits for ranks 0 and 1, and is not reported as a stall.
  EXPECT_THAT(n.Pending(), IsEmpty());
}

TEST(NegotiatorJoinTest, JoinReleasesTensorsThatWaitedOnlyForTheJoiningRank) {
  Negotiator n(3, NoHold());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "a"); });
  ASSERT_EQ(n.Pending().size(), 1u);
  EXPECT_THAT(n.Pending()[0].missing_ranks, ElementsAre(2));
  ASSERT_TRUE(n.Submit(Join(2), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("a"));
  EXPECT_THAT(out[0].joined_ranks, ElementsAre(2));
}

TEST(NegotiatorJoinTest, TensorSubmittedBeforeJoiningUsesTheRanksData) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Request(1, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Join(1), kT0).ok());
  ASSERT_TRUE(n.Submit(Request(0, "a"), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].joined_ranks, IsEmpty());  // every rank contributes its own tensor
}

TEST(NegotiatorJoinTest, LastJoinCompletesEveryJoinWithTheLastRankAndResets) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Join(1), kT0).ok());
  ASSERT_TRUE(n.Submit(Join(0), kT0).ok());
  EXPECT_THAT(PollNow(n), IsEmpty());
  ASSERT_TRUE(n.Submit(Join(2), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, CollectiveType::kJoin);
  EXPECT_THAT(out[0].names, ElementsAre(kJoinTensorName));
  EXPECT_EQ(out[0].root, 2);
  EXPECT_TRUE(n.idle());
  // Nobody is joined any more: a tensor waits for every rank again.
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "next"); });
  EXPECT_THAT(PollNow(n), IsEmpty());
  EXPECT_THAT(n.Pending()[0].missing_ranks, ElementsAre(2));
}

TEST(NegotiatorJoinTest, LastJoinRunsTheTensorsTheEarlierJoinerSubmittedFirst) {
  // Rank 0 submits s0, s1, s2 and joins before they ran; rank 1 submits s0 only, then joins.
  // s1 and s2 run with rank 0's data (rank 1 joined) before the join completes.
  Negotiator n(2, NoHold());
  for (const char* name : {"s0", "s1", "s2"}) ASSERT_TRUE(n.Submit(Request(0, name), kT0).ok());
  ASSERT_TRUE(n.Submit(Join(0), kT0).ok());
  ASSERT_TRUE(n.Submit(Request(1, "s0"), kT0).ok());
  std::vector<Response> first = PollNow(n);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_THAT(first[0].names, ElementsAre("s0"));
  ASSERT_TRUE(n.Submit(Join(1), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0].is_error()) << out[0].error;
  EXPECT_THAT(out[0].names, ElementsAre("s1", "s2"));
  EXPECT_THAT(out[0].joined_ranks, ElementsAre(1));
  EXPECT_EQ(out[1].type, CollectiveType::kJoin);
  EXPECT_EQ(out[1].root, 1);
  EXPECT_TRUE(n.idle());
  EXPECT_THAT(n.Pending(), IsEmpty());
}

TEST(NegotiatorJoinTest, OpsNeedingEveryRankFailWhileARankIsJoined) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Join(2), kT0).ok());
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "x", CollectiveType::kAllgather); });
  SubmitOnRanks(n, {0, 1}, [](int r) { return Request(r, "y", CollectiveType::kReducescatter); });
  SubmitOnRanks(n, {0, 1}, [](int r) {
    TensorRequest b = Request(r, "from2", CollectiveType::kBroadcast);
    b.root = 2;
    return b;
  });
  SubmitOnRanks(n, {0, 1}, [](int r) {
    TensorRequest b = Request(r, "from0", CollectiveType::kBroadcast);
    b.root = 0;
    return b;
  });
  SubmitOnRanks(n, {0, 1}, [](int r) {
    return Request(r, "troika/barrier/0", CollectiveType::kBarrier, {0});
  });
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].error,
            "allgather 'x' cannot run while rank 2 has joined (Context::Join); it needs a tensor "
            "from every rank");
  EXPECT_THAT(out[1].error, HasSubstr("reducescatter 'y' cannot run while rank 2 has joined"));
  // Horovod's rule: no broadcast while a rank has joined, whether or not it is the root.
  EXPECT_EQ(out[2].error,
            "broadcast 'from2' cannot run while rank 2 has joined (Context::Join); as in "
            "Horovod, only allreduces and barriers run while a rank has joined");
  EXPECT_THAT(out[3].error, HasSubstr("broadcast 'from0' cannot run while rank 2 has joined"));
  EXPECT_FALSE(out[4].is_error()) << out[4].error;  // joined ranks take part in barriers
  EXPECT_EQ(out[4].type, CollectiveType::kBarrier);
}

TEST(NegotiatorJoinTest, JoinedRankCompletesAGroup) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Join(1), kT0).ok());
  ASSERT_TRUE(n.Submit(Grouped(0, "g/a", "g", 2), kT0).ok());
  EXPECT_THAT(PollNow(n), IsEmpty());
  ASSERT_TRUE(n.Submit(Grouped(0, "g/b", "g", 2), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("g/a", "g/b"));
  EXPECT_THAT(out[0].joined_ranks, ElementsAre(1));
}

TEST(NegotiatorJoinTest, RankJoiningTwiceIsRejected) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Join(1), kT0).ok());
  EXPECT_EQ(n.Submit(Join(1), kT0).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace troika::coordinator
