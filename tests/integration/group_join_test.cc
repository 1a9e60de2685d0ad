// Grouped allreduces and join through a real coordinator and Gloo: a group comes back correct
// (its fusion is proven at the negotiator, NegotiatorGroupTest), ranks with uneven data join
// and the others' averages count every rank (a joined one adds zeros, as with Horovod), and ops
// that need every rank fail clearly while one has joined.

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

class GroupJoinTest : public ::testing::Test {
 protected:
  void SetUp() override { contexts_ = cluster_.Join("job", kRanks); }
  TestCluster cluster_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(GroupJoinTest, GroupedAllreduceOfFiftyTensorsIsCorrectOnEveryRank) {
  constexpr int kTensors = 50;
  OnEveryRank(kRanks, [&](int rank) {
    for (int step = 0; step < 3; ++step) {  // the group name is reused every step
      std::vector<std::vector<float>> data(kTensors);
      std::vector<GroupTensor> tensors;
      for (int i = 0; i < kTensors; ++i) {
        data[i].assign(i % 7 + 1, static_cast<float>(rank * 100 + i + step));
        tensors.push_back({absl::StrCat("grad/", i),
                           data[i].data(),
                           data[i].data(),
                           DataType::kFloat32,
                           {static_cast<int64_t>(data[i].size())}});
      }
      std::vector<Handle> handles = contexts_[rank]->GroupedAllreduce("step", tensors);
      ASSERT_EQ(handles.size(), static_cast<size_t>(kTensors));
      for (int i = 0; i < kTensors; ++i) {
        absl::Status s = handles[i].Wait();
        ASSERT_TRUE(s.ok()) << "rank " << rank << " tensor " << i << ": " << s;
        const float expected = 600.0f + kRanks * static_cast<float>(i + step);  // 100*(0+1+2+3)
        for (float x : data[i]) EXPECT_EQ(x, expected) << "rank " << rank << " tensor " << i;
      }
    }
  });
}

TEST_F(GroupJoinTest, GroupedAllgatherAndReducescatterAreCorrectOnEveryRank) {
  OnEveryRank(kRanks, [&](int rank) {
    // Allgather: rank r contributes r + 1 rows of tensor i, each row = 10 r + i.
    std::vector<std::vector<float>> in(3);
    std::vector<GroupTensor> tensors;
    for (int i = 0; i < 3; ++i) {
      in[i].assign((rank + 1) * 2, static_cast<float>(10 * rank + i));
      tensors.push_back(
          {absl::StrCat("ag/", i), in[i].data(), nullptr, DataType::kFloat32, {rank + 1, 2}});
    }
    std::vector<Handle> handles = contexts_[rank]->GroupedAllgather("ag", tensors);
    ASSERT_EQ(handles.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(handles[i].Wait().ok()) << handles[i].Wait();
      std::vector<float> want;
      for (int r = 0; r < kRanks; ++r) want.insert(want.end(), (r + 1) * 2, 10.0f * r + i);
      const float* got = static_cast<const float*>(handles[i].output());
      EXPECT_EQ(std::vector<float>(got, got + want.size()), want) << "rank " << rank;
      EXPECT_EQ(handles[i].output_shape(), (std::vector<int64_t>{10, 2}));
    }
    // Reducescatter (Sum): 8 rows of 1, each rank's row j = r + j; rank r gets rows 2r, 2r+1.
    std::vector<std::vector<float>> src(2, std::vector<float>(8)), out(2, std::vector<float>(2));
    std::vector<GroupTensor> parts;
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 8; ++j) src[i][j] = static_cast<float>(rank + j + i);
      parts.push_back({absl::StrCat("rs/", i),
                       src[i].data(),
                       out[i].data(),
                       DataType::kFloat32,
                       {8, 1},
                       out[i].size() * sizeof(float)});
    }
    handles = contexts_[rank]->GroupedReducescatter("rs", parts);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(handles[i].Wait().ok()) << handles[i].Wait();
      for (int k = 0; k < 2; ++k) {
        const int row = 2 * rank + k;  // sum over ranks r of (r + row + i) = 6 + 4 (row + i)
        EXPECT_EQ(out[i][k], 6.0f + 4.0f * static_cast<float>(row + i)) << "rank " << rank;
      }
    }
  });
}

TEST_F(GroupJoinTest, InvalidTensorFailsTheWholeGroupOnThatRankAtOnce) {
  float a = 1, b = 1;
  std::vector<Handle> handles = contexts_[0]->GroupedAllreduce(
      "g", {{"a", &a, &a, DataType::kFloat32, {1}}, {"a", &b, &b, DataType::kFloat32, {1}}});
  for (const Handle& h : handles) {
    absl::Status s = h.WaitFor(absl::Seconds(1));
    EXPECT_THAT(std::string(s.message()), HasSubstr("'a' is already in flight")) << s;
  }
}

// Rank r has (r + 1) * 3 steps of data, then joins. Each step averages 3 tensors; a rank
// that joined contributes zeros and still counts, so the average divides by every rank (as
// Horovod's does).
TEST_F(GroupJoinTest, UnevenDataAveragesOverEveryRankAndJoinReturnsTheLastRank) {
  const std::vector<std::vector<int64_t>> shapes = {{5}, {2, 3}, {1}};
  std::vector<int> last(kRanks, -2);
  OnEveryRank(kRanks, [&](int rank) {
    const int steps = (rank + 1) * 3;
    for (int step = 0; step < steps; ++step) {
      std::vector<std::vector<double>> data(shapes.size());
      std::vector<Handle> handles;
      for (size_t t = 0; t < shapes.size(); ++t) {
        int64_t n = 1;
        for (int64_t d : shapes[t]) n *= d;
        data[t].assign(n, rank * 100.0 + step + t);
        handles.push_back(contexts_[rank]->Allreduce(absl::StrCat("w/", t), data[t].data(),
                                                     data[t].data(), DataType::kFloat64, shapes[t],
                                                     {.op = ReduceOp::kAverage}));
      }
      // Ranks still training at this step: those with more than `step` steps.
      double sum = 0;
      int training = 0;
      for (int r = 0; r < kRanks; ++r) {
        if ((r + 1) * 3 > step) sum += r * 100.0, ++training;
      }
      for (size_t t = 0; t < shapes.size(); ++t) {
        absl::Status s = handles[t].Wait();
        ASSERT_TRUE(s.ok()) << "rank " << rank << " step " << step << ": " << s;
        const double expected = (sum + training * static_cast<double>(step + t)) / kRanks;
        for (double x : data[t]) {
          EXPECT_DOUBLE_EQ(x, expected) << "rank " << rank << " step " << step << " t " << t;
        }
      }
    }
    Handle join = contexts_[rank]->Join();
    absl::Status s = join.Wait();
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s;
    last[rank] = join.joined_last_rank();
    // Join state reset: the next epoch needs every rank again.
    float x = 1.0f;
    ASSERT_TRUE(contexts_[rank]->Allreduce("after", &x, &x, DataType::kFloat32, {1}).Wait().ok());
    EXPECT_EQ(x, kRanks);
  });
  EXPECT_EQ(last, std::vector<int>(kRanks, 3));
  for (int r = 0; r < kRanks; ++r) {
    absl::Status s = contexts_[r]->Shutdown();
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
  }
}

TEST_F(GroupJoinTest, AllgatherWhileARankIsJoinedFailsClearlyAndTheJobGoesOn) {
  std::vector<int> last(kRanks, -2);
  OnEveryRank(kRanks, [&](int rank) {
    if (rank == 3) {
      Handle join = contexts_[rank]->Join();
      // A joined rank submits nothing.
      float y = 1.0f;
      absl::Status refused = contexts_[rank]
                                 ->Allreduce("y", &y, &y, DataType::kFloat32, {1})
                                 .WaitFor(absl::Seconds(1));
      EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
      EXPECT_THAT(std::string(refused.message()), HasSubstr("rank has joined"));
      ASSERT_TRUE(join.Wait().ok());
      last[rank] = join.joined_last_rank();
      return;
    }
    float row[2] = {static_cast<float>(rank), 0};
    absl::Status s = contexts_[rank]->Allgather("x", row, DataType::kFloat32, {1, 2}).Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("allgather 'x' cannot run while rank 3 has joined (Context::Join)"));
    // Joined ranks take part in barriers, and allreduces go on without rank 3's data.
    ASSERT_TRUE(contexts_[rank]->Barrier().Wait().ok());
    float y = 1.0f;
    ASSERT_TRUE(contexts_[rank]->Allreduce("y", &y, &y, DataType::kFloat32, {1}).Wait().ok());
    EXPECT_EQ(y, 3.0f);
    Handle join = contexts_[rank]->Join();
    ASSERT_TRUE(join.Wait().ok());
    last[rank] = join.joined_last_rank();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(last[r], last[0]);
    EXPECT_GE(last[r], 0);
    EXPECT_LE(last[r], 2);
  }
}

}  // namespace
}  // namespace troika::testing
