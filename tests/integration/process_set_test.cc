// Process sets through a real coordinator and Gloo: two disjoint sets negotiate the same
// tensor names independently and concurrently, each reducing over its own ranks, while the
// whole job keeps working; misuse fails clearly and at once.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

class ProcessSetTest : public ::testing::Test {
 protected:
  void SetUp() override { contexts_ = cluster_.Join("job", kRanks); }

  // Every rank adds {0, 1} then {2, 3}; returns the ids (the same on every rank).
  std::vector<int> AddHalves() {
    std::vector<std::vector<int>> ids(kRanks);
    OnEveryRank(kRanks, [&](int rank) {
      for (const std::vector<int>& ranks : {std::vector<int>{0, 1}, std::vector<int>{2, 3}}) {
        absl::StatusOr<int> id = contexts_[rank]->AddProcessSet(ranks);
        ASSERT_TRUE(id.ok()) << "rank " << rank << ": " << id.status();
        ids[rank].push_back(*id);
      }
    });
    for (int r = 1; r < kRanks; ++r) EXPECT_EQ(ids[r], ids[0]);
    return ids[0];
  }

  TestCluster cluster_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(ProcessSetTest, DisjointSetsReduceSameNamesIndependentlyWhileTheJobWorks) {
  const std::vector<int> ids = AddHalves();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  OnEveryRank(kRanks, [&](int rank) {
    const int set = rank < 2 ? ids[0] : ids[1];
    for (int step = 0; step < 5; ++step) {
      std::vector<float> sum(7, rank + 1.0f + step), avg(3, rank * 10.0f), all(2, 1.0f);
      Handle h_sum = contexts_[rank]->Allreduce("grad", sum.data(), sum.data(), DataType::kFloat32,
                                                {7}, {.process_set = set});
      Handle h_avg =
          contexts_[rank]->Allreduce("avg", avg.data(), avg.data(), DataType::kFloat32, {3},
                                     {.op = ReduceOp::kAverage, .process_set = set});
      Handle h_all =
          contexts_[rank]->Allreduce("grad", all.data(), all.data(), DataType::kFloat32, {2});
      ASSERT_TRUE(h_sum.Wait().ok()) << rank << ": " << h_sum.Wait();
      ASSERT_TRUE(h_avg.Wait().ok()) << rank << ": " << h_avg.Wait();
      ASSERT_TRUE(h_all.Wait().ok()) << rank << ": " << h_all.Wait();
      // Set {0, 1}: (1 + 2) + 2 step; set {2, 3}: (3 + 4) + 2 step.
      const float expected_sum = (rank < 2 ? 3.0f : 7.0f) + 2.0f * step;
      const float expected_avg = rank < 2 ? 5.0f : 25.0f;
      for (float x : sum) EXPECT_EQ(x, expected_sum) << "rank " << rank << " step " << step;
      for (float x : avg) EXPECT_EQ(x, expected_avg) << "rank " << rank << " step " << step;
      for (float x : all) EXPECT_EQ(x, 4.0f) << "rank " << rank << " step " << step;
    }
    // Broadcast roots are positions in the set: root 1 is rank 1 or rank 3.
    std::vector<int32_t> b(4, rank);
    Handle h = contexts_[rank]->Broadcast("b", b.data(), b.data(), DataType::kInt32, {4}, 1,
                                          {.process_set = set});
    ASSERT_TRUE(h.Wait().ok()) << h.Wait();
    for (int32_t x : b) EXPECT_EQ(x, rank < 2 ? 1 : 3);
    Handle barrier = contexts_[rank]->Barrier({.process_set = set});
    EXPECT_TRUE(barrier.Wait().ok()) << barrier.Wait();
    std::vector<int32_t> mine = {rank};
    Handle g =
        contexts_[rank]->Allgather("g", mine.data(), DataType::kInt32, {1}, {.process_set = set});
    ASSERT_TRUE(g.Wait().ok()) << g.Wait();
    ASSERT_EQ(g.output_shape(), std::vector<int64_t>{2});
    const int32_t* out = static_cast<const int32_t*>(g.output());
    EXPECT_EQ(out[0], rank < 2 ? 0 : 2);
    EXPECT_EQ(out[1], rank < 2 ? 1 : 3);
  });
}

TEST_F(ProcessSetTest, OpOnASetThisRankIsNotInFailsAtOnce) {
  const std::vector<int> ids = AddHalves();
  float x = 1;
  Handle h = contexts_[0]->Allreduce("x", &x, &x, DataType::kFloat32, {1}, {.process_set = ids[1]});
  absl::Status s = h.WaitFor(absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0 is not in process set")) << s;
  Handle none = contexts_[0]->Barrier({.process_set = 42});
  s = none.WaitFor(absl::Seconds(1));
  EXPECT_THAT(std::string(s.message()), HasSubstr("there is no process set 42")) << s;
}

TEST_F(ProcessSetTest, MismatchedRankListsFailOnEveryRank) {
  std::vector<absl::Status> statuses(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    statuses[rank] =
        contexts_[rank]
            ->AddProcessSet(rank == 3 ? std::vector<int>{0, 2} : std::vector<int>{0, 1})
            .status();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_THAT(std::string(statuses[r].message()),
                HasSubstr("ranks 0-2 passed [0, 1]; rank 3 passed [0, 2]"))
        << statuses[r];
  }
  // An invalid list, the same everywhere, fails everywhere too; the job goes on.
  OnEveryRank(kRanks, [&](int rank) {
    absl::Status s = contexts_[rank]->AddProcessSet({1, 0}).status();
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not an ascending list")) << s;
    float x = 1;
    Handle h = contexts_[rank]->Allreduce("after", &x, &x, DataType::kFloat32, {1});
    EXPECT_TRUE(h.Wait().ok()) << h.Wait();
    EXPECT_EQ(x, 4.0f);
  });
}

TEST_F(ProcessSetTest, OpsOnARemovedSetFailAndTheJobGoesOn) {
  const std::vector<int> ids = AddHalves();
  OnEveryRank(kRanks, [&](int rank) {
    absl::Status s = contexts_[rank]->RemoveProcessSet(ids[0]);
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s;
    float x = 1;
    if (rank < 2) {
      Handle h =
          contexts_[rank]->Allreduce("x", &x, &x, DataType::kFloat32, {1}, {.process_set = ids[0]});
      s = h.WaitFor(absl::Seconds(1));
      EXPECT_THAT(std::string(s.message()), HasSubstr("there is no process set")) << s;
    } else {
      Handle h =
          contexts_[rank]->Allreduce("x", &x, &x, DataType::kFloat32, {1}, {.process_set = ids[1]});
      EXPECT_TRUE(h.Wait().ok()) << h.Wait();
      EXPECT_EQ(x, 2.0f);
    }
    float y = 1;
    Handle all = contexts_[rank]->Allreduce("y", &y, &y, DataType::kFloat32, {1});
    EXPECT_TRUE(all.Wait().ok()) << all.Wait();
    EXPECT_EQ(y, 4.0f);
  });
  OnEveryRank(kRanks, [&](int rank) {
    absl::Status s = contexts_[rank]->RemoveProcessSet(ids[0]);
    EXPECT_THAT(std::string(s.message()), HasSubstr("there is no process set")) << s;
  });
}

TEST_F(ProcessSetTest, MemberGivesPositionAndSizeOrSaysWhyNot) {
  const std::vector<int> ids = AddHalves();
  OnEveryRank(kRanks, [&](int rank) {
    Context& c = *contexts_[rank];
    absl::StatusOr<std::pair<int, int>> whole = c.ProcessSetMember(0);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(*whole, std::make_pair(rank, kRanks));
    const int mine = rank < 2 ? ids[0] : ids[1];
    const int other = rank < 2 ? ids[1] : ids[0];
    absl::StatusOr<std::pair<int, int>> in = c.ProcessSetMember(mine);
    ASSERT_TRUE(in.ok()) << in.status();
    EXPECT_EQ(*in, std::make_pair(rank % 2, 2));
    absl::StatusOr<std::pair<int, int>> out = c.ProcessSetMember(other);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, std::make_pair(-1, 2));
    EXPECT_EQ(c.ProcessSetMember(999).status().code(), absl::StatusCode::kNotFound);
  });
}

}  // namespace
}  // namespace troika::testing
