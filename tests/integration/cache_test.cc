// The response cache end to end: a steady-state training loop through a real coordinator
// with the cache at several capacities — including ones so small that ids are evicted while
// ranks still use them (the CacheMiss path) — gives correct results, and the cache shrinks
// what the ranks send.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kSteps = 30;
constexpr int kTensors = 6;

// Runs kSteps steps of kTensors allreduces (one of which changes shape half-way) and one
// allgather with a different dim 0 per rank, checking every result. Returns the coordinator's
// cache statistics, read while the job still runs.
coordinator::CacheStats Train(TestCluster& cluster) {
  auto contexts = cluster.Join("job", kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    Context& c = *contexts[rank];
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> data(kTensors);
      std::vector<Handle> handles;
      for (int t = 0; t < kTensors; ++t) {
        // A changed request invalidates its entry: "grad/2" grows at step kSteps / 2.
        const int64_t elements = (t == 2 && step >= kSteps / 2) ? 9 : 3 + t;
        data[t].assign(elements, static_cast<float>(rank + t + step));
        handles.push_back(c.Allreduce(absl::StrCat("grad/", t), data[t].data(), data[t].data(),
                                      DataType::kFloat32, {elements}));
      }
      std::vector<int32_t> rows(rank + 1, rank);
      Handle gathered = c.Allgather("rows", rows.data(), DataType::kInt32, {rank + 1});
      for (int t = 0; t < kTensors; ++t) {
        ASSERT_TRUE(handles[t].Wait().ok()) << handles[t].Wait();
        // sum over ranks of (rank + t + step)
        const float expected = static_cast<float>(kRanks * (t + step) + kRanks * (kRanks - 1) / 2);
        for (float v : data[t]) ASSERT_EQ(v, expected) << "rank " << rank << " step " << step;
      }
      ASSERT_TRUE(gathered.Wait().ok()) << gathered.Wait();
      const auto* out = static_cast<const int32_t*>(gathered.output());
      int i = 0;
      for (int r = 0; r < kRanks; ++r) {
        for (int k = 0; k <= r; ++k) ASSERT_EQ(out[i++], r);
      }
    }
  });
  auto job = cluster.coordinator().registry().Find("job");
  EXPECT_TRUE(job.ok());
  coordinator::CacheStats stats = job.ok() ? (*job)->Describe().cache : coordinator::CacheStats{};
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
  return stats;
}

coordinator::NegotiatorOptions WithCache(int capacity) {
  coordinator::NegotiatorOptions options;
  options.cache_capacity = capacity;
  return options;
}

class CacheCapacityTest : public ::testing::TestWithParam<int> {};

TEST_P(CacheCapacityTest, SteadyStateResultsAreCorrectAtAnyCapacity) {
  TestCluster cluster(WithCache(GetParam()));
  const coordinator::CacheStats stats = Train(cluster);
  const int64_t tensors = kSteps * (kTensors + 1);
  EXPECT_EQ(stats.hits + stats.misses, GetParam() == 0 ? 0 : tensors);
  EXPECT_LE(stats.entries, GetParam());
  if (GetParam() >= kTensors + 1) {
    // Every tensor misses once, "grad/2" once more when it changes; the rest hit.
    EXPECT_EQ(stats.misses, kTensors + 2);
    EXPECT_EQ(stats.evictions, 0);
    EXPECT_EQ(stats.resends, 0);
  } else if (GetParam() > 0) {
    EXPECT_GT(stats.evictions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Capacities, CacheCapacityTest, ::testing::Values(0, 1, 3, 1024),
                         [](const auto& info) { return absl::StrCat("Capacity", info.param); });

TEST(CacheTrafficTest, CacheShrinksWhatRanksSendByHalfOrMore) {
  auto up_bytes = [](int capacity) {
    TestCluster cluster(WithCache(capacity));
    Train(cluster);
    return cluster.coordinator().control_stats().up_bytes.load();
  };
  const int64_t with_cache = up_bytes(1024), without = up_bytes(0);
  EXPECT_LT(with_cache * 2, without) << "with cache " << with_cache << " B, without " << without;
}

}  // namespace
}  // namespace troika::testing
