#include <vector>

#include "bench/byte_size.h"
#include "bench/report.h"
#include "bench/workloads.h"
#include "gtest/gtest.h"

namespace troika::bench {
namespace {

TEST(ByteSizeTest, ParsesCountsWithBinarySuffixes) {
  EXPECT_EQ(ParseByteSize("4"), 4u);
  EXPECT_EQ(ParseByteSize("16K"), 16u << 10);
  EXPECT_EQ(ParseByteSize("16KiB"), 16u << 10);
  EXPECT_EQ(ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(ParseByteSize("256M"), 256u << 20);
  EXPECT_EQ(ParseByteSize("1GiB"), size_t{1} << 30);
  EXPECT_EQ(ParseByteSize("10B"), 10u);
  for (const char* bad : {"", "K", "-4", "4X", "4 K", "4KB", "99999999999999999999"}) {
    EXPECT_EQ(ParseByteSize(bad), std::nullopt) << bad;
  }
}

TEST(ByteSizeTest, FormatsTheShortestExactForm) {
  EXPECT_EQ(FormatByteSize(4), "4");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(16384), "16K");
  EXPECT_EQ(FormatByteSize(64u << 20), "64M");
  EXPECT_EQ(FormatByteSize(size_t{3} << 30), "3G");
  EXPECT_EQ(FormatByteSize(1536), "1536");
}

TEST(WorkloadsTest, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(Kind::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusFactor(Kind::kAllgather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Kind::kReducescatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Kind::kAlltoall, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Kind::kBroadcast, 4), 1.0);
}

TEST(WorkloadsTest, EffectiveBytesRoundsToWhatTheCollectiveNeeds) {
  EXPECT_EQ(EffectiveBytes(Kind::kAllreduce, 4, 4), 4u);
  EXPECT_EQ(EffectiveBytes(Kind::kAllreduce, 7, 4), 4u);
  EXPECT_EQ(EffectiveBytes(Kind::kBroadcast, 7, 4), 7u);
  EXPECT_EQ(EffectiveBytes(Kind::kAllgather, 4, 3), 3u);
  EXPECT_EQ(EffectiveBytes(Kind::kAlltoall, 2, 4), 4u);
  EXPECT_EQ(EffectiveBytes(Kind::kReducescatter, 4, 4), 16u);
  EXPECT_EQ(EffectiveBytes(Kind::kReducescatter, 256u << 20, 3), (256u << 20) / 12 * 12);
}

TEST(WorkloadsTest, EveryKindHasAName) {
  for (const KindInfo& info : AllKinds()) {
    EXPECT_EQ(KindFromName(info.name), info.kind);
    EXPECT_STREQ(KindName(info.kind), info.name);
  }
  EXPECT_EQ(KindFromName("allreduce2"), std::nullopt);
}

TEST(ReportTest, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({}), 0);
}

}  // namespace
}  // namespace troika::bench
