#pragma once
// What the steady-state schedule suites share (their tests live in this namespace too): 4
// ranks over a TestCluster with schedules on, each rank's inputs (the same every step) and
// their sums, and the job.

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing::schedule_steps {

inline constexpr int kRanks = 4;

// `buckets` off: schedules keep negotiation's fusion (so their bits are negotiation's).
inline coordinator::CoordinatorOptions Schedules(bool on, int64_t fusion_threshold_bytes = 64 << 20,
                                                 bool buckets = true) {
  coordinator::CoordinatorOptions options;
  options.registry.job.schedules = on;
  options.registry.job.schedule_buckets = buckets;
  options.registry.job.negotiator.fusion_threshold_bytes = fusion_threshold_bytes;
  return options;
}

// What rank `rank` contributes to tensor `tensor`: random values, the same in every step, so
// that every step's result must be the same bits.
inline std::vector<float> Input(int rank, int tensor, int64_t elements) {
  std::mt19937 gen(static_cast<uint32_t>(rank * 1000 + tensor));
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(static_cast<size_t>(elements));
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<float> Sum(int tensor, int64_t elements) {
  std::vector<float> sum(static_cast<size_t>(elements), 0);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> in = Input(r, tensor, elements);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += in[i];
  }
  return sum;
}

inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5) << what << " [" << i << "]";
  }
}

// Ranks of a real job shut down about together; a rank shutting down in a schedule waits (up
// to 5 s) for the others to reach its void entry, so ranks are shut down concurrently here
// rather than one after another by the contexts' destructors.
inline void ShutdownAll(std::vector<std::unique_ptr<Context>>& contexts) {
  OnEveryRank(static_cast<int>(contexts.size()),
              [&](int rank) { EXPECT_TRUE(contexts[rank]->Shutdown().ok()) << "rank " << rank; });
}

// One step: each rank allreduces tensors "t<i>" of `sizes[i]` floats, all submitted, then
// waited — or, `wait`, one after another with AllreduceOptions::wait (a scheduled one runs on
// the rank's own thread). Returns every rank's results, by rank and tensor.
using StepResults = std::vector<std::vector<std::vector<float>>>;
inline StepResults Step(std::vector<std::unique_ptr<Context>>& contexts,
                        const std::vector<int64_t>& sizes, bool wait = false) {
  StepResults results(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<std::vector<float>>& mine = results[rank];
    std::vector<Handle> handles;
    for (size_t t = 0; t < sizes.size(); ++t) {
      mine.push_back(Input(rank, static_cast<int>(t), sizes[t]));
      handles.push_back(contexts[rank]->Allreduce(absl::StrCat("t", t), mine[t].data(),
                                                  mine[t].data(), DataType::kFloat32, {sizes[t]},
                                                  {.wait = wait}));
      if (wait) {
        ASSERT_TRUE(handles.back().Poll()) << "a synchronous allreduce returned early";
      }
    }
    for (Handle& h : handles) ASSERT_TRUE(h.Wait().ok()) << h.Wait();
  });
  return results;
}

inline void ExpectSums(const StepResults& results, const std::vector<int64_t>& sizes,
                       const std::string& what) {
  for (int r = 0; r < kRanks; ++r) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      ExpectNear(results[r][t], Sum(static_cast<int>(t), sizes[t]),
                 absl::StrCat(what, ", rank ", r, ", t", t));
    }
  }
}

inline std::shared_ptr<coordinator::Job> FindJob(TestCluster& cluster) {
  auto job = cluster.coordinator().registry().Find("job");
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : nullptr;
}

}  // namespace troika::testing::schedule_steps
