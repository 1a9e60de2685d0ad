// Negotiation through a real coordinator: mismatches fail clearly on every rank and the job
// goes on; jobs are isolated; misuse fails at once instead of hanging.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

// Allreduces `name` on every rank with rank 3's request altered by `change`; returns each
// rank's status and checks that the job still works afterwards.
std::vector<absl::Status> MismatchOnRank3(
    std::vector<std::unique_ptr<Context>>& contexts, const std::string& name,
    const std::function<void(DataType&, std::vector<int64_t>&, AllreduceOptions&)>& change) {
  std::vector<absl::Status> statuses(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    DataType dtype = DataType::kFloat32;
    std::vector<int64_t> shape = {4};
    AllreduceOptions options;
    if (rank == 3) change(dtype, shape, options);
    std::vector<double> data(8, 1.0);
    absl::Time start = absl::Now();
    statuses[rank] =
        contexts[rank]->Allreduce(name, data.data(), data.data(), dtype, shape, options).Wait();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "rank " << rank;
    // The next tensor of the same job still works.
    float x = 1.0f;
    absl::Status next =
        contexts[rank]->Allreduce(name + "/next", &x, &x, DataType::kFloat32, {1}).Wait();
    EXPECT_TRUE(next.ok()) << next;
    EXPECT_EQ(x, kRanks);
  });
  return statuses;
}

void ExpectSameErrorEverywhere(const std::vector<absl::Status>& statuses,
                               const std::string& expected) {
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_EQ(statuses[r].message(), statuses[0].message()) << "rank " << r;
    EXPECT_THAT(std::string(statuses[r].message()), HasSubstr(expected)) << "rank " << r;
  }
}

class NegotiationTest : public ::testing::Test {
 protected:
  void SetUp() override { contexts_ = cluster_.Join("job", kRanks); }
  TestCluster cluster_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(NegotiationTest, MismatchedShapeFailsOnEveryRankAndJobGoesOn) {
  auto statuses = MismatchOnRank3(
      contexts_, "grad/fc1",
      [](DataType&, std::vector<int64_t>& shape, AllreduceOptions&) { shape = {5}; });
  ExpectSameErrorEverywhere(statuses,
                            "Mismatched allreduce shapes for 'grad/fc1': ranks 0-2 sent [4], "
                            "rank 3 sent [5]");
}

TEST_F(NegotiationTest, MismatchedDtypeFailsOnEveryRankAndJobGoesOn) {
  auto statuses = MismatchOnRank3(contexts_, "grad/fc2",
                                  [](DataType& dtype, std::vector<int64_t>&, AllreduceOptions&) {
                                    dtype = DataType::kFloat64;
                                  });
  ExpectSameErrorEverywhere(statuses,
                            "data types for 'grad/fc2': ranks 0-2 sent float32, rank 3 sent "
                            "float64");
}

TEST_F(NegotiationTest, MismatchedReduceOpFailsOnEveryRankAndJobGoesOn) {
  auto statuses = MismatchOnRank3(
      contexts_, "grad/fc3",
      [](DataType&, std::vector<int64_t>&, AllreduceOptions& o) { o.op = ReduceOp::kMax; });
  ExpectSameErrorEverywhere(statuses,
                            "reduce ops for 'grad/fc3': ranks 0-2 sent sum, rank 3 sent max");
}

TEST_F(NegotiationTest, MismatchedOperationFailsOnEveryRank) {
  std::vector<absl::Status> statuses(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    float x[4] = {1, 2, 3, 4};
    Handle h = rank == 0 ? contexts_[rank]->Broadcast("t", x, x, DataType::kFloat32, {4}, 0)
                         : contexts_[rank]->Allreduce("t", x, x, DataType::kFloat32, {4});
    statuses[rank] = h.Wait();
  });
  ExpectSameErrorEverywhere(statuses, "rank 0 sent broadcast, ranks 1-3 sent allreduce");
}

TEST_F(NegotiationTest, NameAlreadyInFlightIsAnImmediateError) {
  float x = 1, y = 1;
  Handle first = contexts_[0]->Allreduce("dup", &x, &x, DataType::kFloat32, {1});
  Handle second = contexts_[0]->Allreduce("dup", &y, &y, DataType::kFloat32, {1});
  ASSERT_TRUE(second.Poll());
  EXPECT_EQ(second.Wait().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(second.Refusal(), second.Wait());  // refused at submission: it never ran
  EXPECT_FALSE(first.Poll());
  EXPECT_EQ(first.Refusal(), std::nullopt);
  // The others join in; the first one completes normally.
  OnEveryRank(kRanks - 1, [&](int r) {
    float z = 1;
    EXPECT_TRUE(contexts_[r + 1]->Allreduce("dup", &z, &z, DataType::kFloat32, {1}).Wait().ok());
  });
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_EQ(first.Refusal(), std::nullopt);
  EXPECT_EQ(x, kRanks);
}

TEST_F(NegotiationTest, InvalidRequestIsAnImmediateError) {
  float x[3] = {};
  Handle h = contexts_[0]->Alltoall("bad", x, DataType::kFloat32, {3});  // 3 rows, 4 ranks
  ASSERT_TRUE(h.Poll());
  EXPECT_EQ(h.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(h.Wait().message()), HasSubstr("not divisible by 4"));
}

TEST_F(NegotiationTest, ShutdownFailsLaterOpsAtOnceAndPeersGetAClearError) {
  ASSERT_TRUE(contexts_[3]->Shutdown().ok());
  float x = 1;
  Handle after = contexts_[3]->Allreduce("late", &x, &x, DataType::kFloat32, {1});
  ASSERT_TRUE(after.Poll());
  EXPECT_EQ(after.Wait().code(), absl::StatusCode::kCancelled);
  OnEveryRank(kRanks - 1, [&](int r) {
    float y = 1;
    absl::Status s = contexts_[r]
                         ->Allreduce("needs3", &y, &y, DataType::kFloat32, {1})
                         .WaitFor(absl::Seconds(5));
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 3 has shut down")) << s;
  });
}

TEST(JobIsolationTest, TwoJobsAtOnceDoNotInterfere) {
  TestCluster cluster;
  std::vector<std::unique_ptr<Context>> a, b;
  std::thread join_b([&] { b = cluster.Join("b", 2); });
  a = cluster.Join("a", 3);
  join_b.join();
  // The same tensor names in both jobs, concurrently; each job reduces its own ranks only.
  auto run = [](std::vector<std::unique_ptr<Context>>& job, float base) {
    OnEveryRank(static_cast<int>(job.size()), [&](int rank) {
      for (int step = 0; step < 20; ++step) {
        std::vector<float> v(1000, base);
        ASSERT_TRUE(job[rank]
                        ->Allreduce(absl::StrCat("grad/", step), v.data(), v.data(),
                                    DataType::kFloat32, {1000})
                        .Wait()
                        .ok());
        ASSERT_EQ(v[999], base * job.size());
      }
    });
  };
  std::thread run_b([&] { run(b, 10.0f); });
  run(a, 1.0f);
  run_b.join();
}

TEST(AttachTest, MissingRankIsNamedAfterTimeout) {
  TestCluster cluster;
  std::vector<absl::Status> statuses(2);
  OnEveryRank(2, [&](int rank) {
    Options o = cluster.RankOptions("short", rank, 3);
    o.attach_timeout = absl::Milliseconds(500);
    statuses[rank] = Context::Init(o).status();
  });
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 2 did not attach")) << s;
  }
}

TEST(AttachTest, UnreachableCoordinatorFailsWithAClearError) {
  Options o;
  o.coordinator = "127.0.0.1:1";
  o.plaintext = true;
  o.job = "nowhere";
  o.rank = 0;
  o.size = 1;
  o.attach_timeout = absl::Milliseconds(300);
  absl::Status s = Context::Init(o).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("127.0.0.1:1"));
}

}  // namespace
}  // namespace troika::testing
