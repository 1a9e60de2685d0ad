// ProcessSets: adding sets through control barriers, routing by set with ranks translated
// to positions in the set, and global ranks in what the sets report; set 0 as the set of
// every rank, with the cache, polled after the others with its control barriers applied.

#include "coordinator/negotiation/process_sets.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::Allreduce;
using test_util::Control;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kSize = 4;
const absl::Time kNow = absl::FromUnixSeconds(1000);

// Records the control request `name` from every rank with `lists[rank]` and applies it.
Response ApplyControl(ProcessSets& sets, const std::string& name,
                      const std::vector<std::vector<int>>& lists, std::vector<Response>* out) {
  for (int r = 0; r < kSize; ++r) {
    TensorRequest request = Control(name, r, lists[r]);
    EXPECT_TRUE(ProcessSets::IsControl(request));
    sets.Record(request);
  }
  Response response;
  response.type = CollectiveType::kBarrier;
  response.names = {name};
  sets.Apply(&response, {}, out);
  return response;
}

class ProcessSetsTest : public ::testing::Test {
 protected:
  int Add(std::vector<int> ranks) {
    std::vector<Response> out;
    Response r = ApplyControl(sets_, "troika/process_set/add/" + std::to_string(n_++),
                              std::vector<std::vector<int>>(kSize, ranks), &out);
    EXPECT_FALSE(r.is_error()) << r.error;
    return r.root;
  }
  ProcessSets sets_{kSize, NegotiatorOptions{.cycle_time = absl::ZeroDuration()}};
  std::vector<int64_t> allreduce_bytes_;  // what Poll reports for metrics
  int n_ = 0;
};

TEST_F(ProcessSetsTest, SameNameInTwoSetsIsNegotiatedPerSetWithSetPositions) {
  const int a = Add({0, 1}), b = Add({2, 3});
  EXPECT_NE(a, b);
  EXPECT_GT(a, 0);
  std::optional<Response> rejected;
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 2, b), kNow, &rejected).ok());
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 0, a), kNow, &rejected).ok());
  EXPECT_FALSE(rejected);
  // Each set misses one rank, named globally.
  std::vector<PendingTensor> pending = sets_.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].name, "g (process set " + std::to_string(a) + ")");
  EXPECT_EQ(pending[0].missing_ranks, std::vector<int>{1});
  EXPECT_EQ(pending[1].missing_ranks, std::vector<int>{3});
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 3, b), kNow, &rejected).ok());
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].process_set, b);
  EXPECT_EQ(responses[0].names, std::vector<std::string>{"g"});
  EXPECT_TRUE(sets_.has_pending());  // set a still waits for rank 1
}

TEST_F(ProcessSetsTest, NonMemberAndUnknownSetAndJoinAreRejectedForTheirTensor) {
  const int a = Add({0, 1});
  std::optional<Response> rejected;
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 2, a), kNow, &rejected).ok());
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->process_set, a);
  EXPECT_THAT(rejected->error, HasSubstr("rank 2 is not in process set"));
  rejected.reset();
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 0, 9), kNow, &rejected).ok());
  ASSERT_TRUE(rejected);
  EXPECT_THAT(rejected->error, HasSubstr("there is no process set 9"));
  TensorRequest join = Allreduce("troika/join", 0, a);
  join.type = CollectiveType::kJoin;
  rejected.reset();
  ASSERT_TRUE(sets_.Submit(join, kNow, &rejected).ok());
  ASSERT_TRUE(rejected);
  EXPECT_THAT(rejected->error, HasSubstr("Join"));
}

TEST_F(ProcessSetsTest, MismatchedListsFailNamingEachRanksList) {
  std::vector<Response> out;
  Response r =
      ApplyControl(sets_, "troika/process_set/add/0", {{0, 1}, {0, 1}, {0, 1}, {1, 2}}, &out);
  EXPECT_THAT(r.error, HasSubstr("ranks 0-2 passed [0, 1]; rank 3 passed [1, 2]"));
  r = ApplyControl(sets_, "troika/process_set/add/1", std::vector<std::vector<int>>(4, {2, 9}),
                   &out);
  EXPECT_THAT(r.error, HasSubstr("is not an ascending list"));
  EXPECT_EQ(sets_.count(), 0);
}

TEST_F(ProcessSetsTest, RemoveFailsPendingTensorsAndDepartedRanksAreNamedGlobally) {
  const int a = Add({1, 3});
  std::optional<Response> rejected;
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 3, a), kNow, &rejected).ok());
  sets_.RemoveRank(1, "has shut down");
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_THAT(responses[0].error, HasSubstr("rank 0 (global rank 1) has shut down"));
  ASSERT_TRUE(sets_.Submit(Allreduce("h", 3, a), kNow, &rejected).ok());
  std::vector<Response> out;
  Response removed = ApplyControl(sets_, "troika/process_set/remove/1",
                                  std::vector<std::vector<int>>(kSize, {a}), &out);
  EXPECT_FALSE(removed.is_error()) << removed.error;
  EXPECT_EQ(sets_.count(), 0);
  removed = ApplyControl(sets_, "troika/process_set/remove/2",
                         std::vector<std::vector<int>>(kSize, {a}), &out);
  EXPECT_THAT(removed.error, HasSubstr("there is no process set"));
}

TEST_F(ProcessSetsTest, SetZeroIsEveryRankWithTheResponseCache) {
  EXPECT_EQ(*sets_.ranks(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(sets_.count(), 0) << "set 0 is not an added set";
  EXPECT_TRUE(sets_.Definitions().empty()) << "nor part of the state record";
  std::optional<Response> rejected;
  for (int r = 0; r < kSize; ++r)
    ASSERT_TRUE(sets_.Submit(Allreduce("g", r, 0), kNow, &rejected).ok());
  EXPECT_FALSE(rejected);
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].process_set, 0);
  ASSERT_EQ(responses[0].cache_ids.size(), 1u);
  EXPECT_EQ(allreduce_bytes_, std::vector<int64_t>{16});
  EXPECT_EQ(sets_.TakeReadyRecords().at(0).size(), 1u);
  // The id alone stands for the request from now on.
  absl::StatusOr<bool> known = sets_.SubmitCached({0, 1, 2, 3}, responses[0].cache_ids[0], kNow);
  ASSERT_TRUE(known.ok() && *known);
  responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].ids_known);
}

TEST_F(ProcessSetsTest, OtherSetsComeFirstAndARemovedSetsLastResponsesPrecedeItsBarrier) {
  const int a = Add({0, 1});
  std::optional<Response> rejected;
  // Set 0's tensor is ready before set a's, yet goes after it in the one order.
  for (int r = 0; r < kSize; ++r)
    ASSERT_TRUE(sets_.Submit(Allreduce("g", r, 0), kNow, &rejected).ok());
  ASSERT_TRUE(sets_.Submit(Allreduce("h", 0, a), kNow, &rejected).ok());
  ASSERT_TRUE(sets_.Submit(Allreduce("h", 1, a), kNow, &rejected).ok());
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].process_set, a);
  EXPECT_EQ(responses[1].names, std::vector<std::string>{"g"});
  // Set a waits for rank 1's "p" when every rank removes it through set 0.
  ASSERT_TRUE(sets_.Submit(Allreduce("p", 0, a), kNow, &rejected).ok());
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(sets_.Submit(Control("troika/process_set/remove/0", r, {a}), kNow, &rejected).ok());
  }
  responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].process_set, a);
  EXPECT_THAT(responses[0].error, HasSubstr("process set " + std::to_string(a) + " was removed"));
  EXPECT_EQ(responses[1].names, std::vector<std::string>{"troika/process_set/remove/0"});
  EXPECT_FALSE(responses[1].is_error()) << responses[1].error;
  EXPECT_EQ(responses[1].root, a);
  EXPECT_EQ(sets_.count(), 0);
}

TEST_F(ProcessSetsTest, AnAddThroughSetZeroLeavesOutRanksThatLeft) {
  std::optional<Response> rejected;
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(sets_.Submit(Control("troika/process_set/add/0", r, {1, 2}), kNow, &rejected).ok());
  }
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {2}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  const int a = responses[0].root;
  ASSERT_GT(a, 0) << responses[0].error;
  ASSERT_TRUE(sets_.Submit(Allreduce("h", 1, a), kNow, &rejected).ok());
  responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_THAT(responses[0].error, HasSubstr("(global rank 2) has shut down"));
}

TEST_F(ProcessSetsTest, ARankLeavingSetZeroIsNamedAsItself) {
  std::optional<Response> rejected;
  ASSERT_TRUE(sets_.Submit(Allreduce("g", 0, 0), kNow, &rejected).ok());
  EXPECT_TRUE(sets_.has_pending());
  ASSERT_EQ(sets_.Pending().size(), 1u);
  EXPECT_EQ(sets_.Pending()[0].name, "g") << "set 0's names are the tensors' own";
  EXPECT_EQ(sets_.Pending()[0].missing_ranks, (std::vector<int>{1, 2, 3}));
  sets_.RemoveRank(3, "has shut down");
  absl::Time next;
  std::vector<Response> responses = sets_.Poll(kNow, {}, &next, &allreduce_bytes_);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_THAT(responses[0].error, HasSubstr("rank 3 has shut down"));
  EXPECT_THAT(responses[0].error, Not(HasSubstr("global")));
  EXPECT_FALSE(sets_.has_pending());
}

TEST_F(ProcessSetsTest, CacheIdsAndRankListsOutsideSetZeroAreProtocolErrors) {
  const int a = Add({0, 1});
  std::optional<Response> rejected;
  TensorRequest cached = Allreduce("h", 0, a);
  cached.cache_id = 3;
  EXPECT_EQ(sets_.Submit(cached, kNow, &rejected).code(), absl::StatusCode::kInvalidArgument);
  TensorRequest listed = Allreduce("h", 0, a);
  listed.process_set_ranks = {0};
  EXPECT_EQ(sets_.Submit(listed, kNow, &rejected).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(rejected);
}

}  // namespace
}  // namespace troika::coordinator
