#include "coordinator/inspection/straggler_stats.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

// Arrival times `ms` milliseconds after kT0, by rank.
std::vector<absl::Time> At(std::vector<int> ms) {
  std::vector<absl::Time> out;
  for (int m : ms) out.push_back(kT0 + absl::Milliseconds(m));
  return out;
}

TEST(StragglerStatsTest, LatenessIsMeasuredFromTheEarliestRank) {
  StragglerStats stats(3);
  stats.OnReady(At({10, 0, 40}));  // lateness 10, 0, 40; rank 2 last
  stats.OnReady(At({5, 25, 0}));   // lateness 5, 25, 0; rank 1 last
  StragglerSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.tensors, 2);
  EXPECT_EQ(s.window_size, 2);
  ASSERT_EQ(s.ranks.size(), 3u);
  EXPECT_EQ(s.ranks[0].count, 2);
  EXPECT_EQ(s.ranks[0].mean_lateness, absl::Microseconds(7500));
  EXPECT_EQ(s.ranks[0].max_lateness, absl::Milliseconds(10));
  EXPECT_EQ(s.ranks[0].last_count, 0);
  EXPECT_EQ(s.ranks[1].mean_lateness, absl::Microseconds(12500));
  EXPECT_EQ(s.ranks[1].max_lateness, absl::Milliseconds(25));
  EXPECT_EQ(s.ranks[1].last_count, 1);
  EXPECT_EQ(s.ranks[2].mean_lateness, absl::Milliseconds(20));
  EXPECT_EQ(s.ranks[2].max_lateness, absl::Milliseconds(40));
  EXPECT_EQ(s.ranks[2].last_count, 1);
}

TEST(StragglerStatsTest, TieForLastCountsNoRank) {
  StragglerStats stats(3);
  stats.OnReady(At({0, 20, 20}));
  StragglerSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.ranks[1].last_count, 0);
  EXPECT_EQ(s.ranks[2].last_count, 0);
  EXPECT_EQ(s.ranks[2].mean_lateness, absl::Milliseconds(20));
}

TEST(StragglerStatsTest, ConsistentlyLateRankIsAStraggler) {
  StragglerStats stats(4);
  for (int i = 0; i < 10; ++i) stats.OnReady(At({0, 2, 1, 50 + i}));
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(10)), ElementsAre(3));
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(55)), IsEmpty());  // mean is 54.5 ms
}

TEST(StragglerStatsTest, LateRankBelowMarginIsNotAStraggler) {
  StragglerStats stats(2);
  for (int i = 0; i < 10; ++i) stats.OnReady(At({0, 5}));
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(10)), IsEmpty());
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(5)), ElementsAre(1));
}

TEST(StragglerStatsTest, RankLastInFewerThanHalfOfTensorsIsNotAStraggler) {
  StragglerStats stats(3);
  // Rank 2 is last 4 times of 10, very late each time; rank 1 last the other 6, barely.
  for (int i = 0; i < 4; ++i) stats.OnReady(At({0, 1, 100}));
  for (int i = 0; i < 6; ++i) stats.OnReady(At({0, 20, 19}));
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(10)), ElementsAre(1));
}

TEST(StragglerStatsTest, OnlyTheRecentWindowDecidesWhoIsLastMostOften) {
  StragglerStats stats(2, /*window=*/4);
  for (int i = 0; i < 100; ++i) stats.OnReady(At({0, 30}));  // rank 1 was slow for long
  for (int i = 0; i < 4; ++i) stats.OnReady(At({30, 0}));    // now rank 0 is
  EXPECT_THAT(stats.Stragglers(absl::Milliseconds(10)), ElementsAre(0));
  StragglerSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.window_size, 4);
  EXPECT_EQ(s.ranks[1].window_last_count, 0);
  EXPECT_EQ(s.ranks[1].last_count, 100);
  EXPECT_EQ(s.ranks[0].window_last_count, 4);
  EXPECT_EQ(s.ranks[0].window_last_lateness, absl::Milliseconds(30));
}

TEST(StragglerStatsTest, NoTensorsMeansNoStragglers) {
  StragglerStats stats(2);
  EXPECT_THAT(stats.Stragglers(absl::ZeroDuration()), IsEmpty());
  EXPECT_EQ(stats.Snapshot().tensors, 0);
}

TEST(StragglerStatsTest, SingleRankIsNeverLast) {
  StragglerStats stats(1);
  stats.OnReady(At({7}));
  EXPECT_EQ(stats.Snapshot().ranks[0].last_count, 0);
  EXPECT_THAT(stats.Stragglers(absl::ZeroDuration()), IsEmpty());
}

}  // namespace
}  // namespace troika::coordinator
