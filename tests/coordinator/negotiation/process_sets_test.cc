// ProcessSets: adding sets through control barriers, routing by set with ranks translated
// to positions in the set, and global ranks in what the sets report.

#include "coordinator/negotiation/process_sets.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr int kSize = 4;
const absl::Time kNow = absl::FromUnixSeconds(1000);

TensorRequest Control(const std::string& name, int rank, std::vector<int> ranks) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.type = CollectiveType::kBarrier;
  r.dtype = DataType::kUint8;
  r.shape = {0};
  r.process_set_ranks = std::move(ranks);
  return r;
}

TensorRequest Allreduce(const std::string& name, int rank, int set) {
  TensorRequest r;
  r.rank = rank;
  r.name = name;
  r.shape = {4};
  r.process_set = set;
  return r;
}

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
  std::vector<ReadyRecord> records_;      // what Poll reports for metrics
  std::vector<int64_t> allreduce_bytes_;  // ditto
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
  std::vector<Response> responses = sets_.Poll(kNow, &next, &records_, &allreduce_bytes_);
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
  std::vector<Response> responses = sets_.Poll(kNow, &next, &records_, &allreduce_bytes_);
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

}  // namespace
}  // namespace troika::coordinator
