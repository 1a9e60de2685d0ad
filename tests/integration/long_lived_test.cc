// The coordinator is long-lived: jobs come and go, and a finished job's resources are
// released, so 100 sequential jobs leave nothing behind.

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

// Resident set size of this process, in bytes.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

bool WaitForNoJobs(coordinator::Coordinator& c, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!c.registry().Jobs().empty()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(LongLivedCoordinatorTest, HundredSequentialJobsReleaseEverything) {
  TestCluster cluster;
  int64_t rss_after_warmup = 0;
  for (int j = 0; j < 100; ++j) {
    {
      auto contexts = cluster.Join(absl::StrCat("job-", j), 2);
      ASSERT_EQ(contexts.size(), 2u);
      OnEveryRank(2, [&](int rank) {
        std::vector<float> v(4096, 1.0f);
        ASSERT_TRUE(contexts[rank]
                        ->Allreduce("grad", v.data(), v.data(), DataType::kFloat32, {4096})
                        .Wait()
                        .ok());
      });
    }  // every rank shuts down cleanly here
    ASSERT_TRUE(WaitForNoJobs(cluster.coordinator(), absl::Seconds(5)))
        << "job-" << j << " was not released";
    if (j == 9) rss_after_warmup = ResidentBytes();
  }
  // Generous: per-job leaks of even 100 KiB would add up to 9 MiB over 90 jobs.
  EXPECT_LT(ResidentBytes() - rss_after_warmup, 8 << 20)
      << "resident memory grew across 90 finished jobs";
}

}  // namespace
}  // namespace troika::testing
