#include "common/messages.h"

#include "gtest/gtest.h"

namespace troika {
namespace {

TEST(FormatRanksTest, CollapsesRuns) {
  EXPECT_EQ(FormatRanks({3}), "rank 3");
  EXPECT_EQ(FormatRanks({0, 1, 2}), "ranks 0-2");
  EXPECT_EQ(FormatRanks({0, 2, 5, 6, 7}), "ranks 0, 2, 5-7");
  EXPECT_EQ(FormatRanks({}), "no ranks");
}

TEST(DescribeRankExitTest, NamesTheRankTheHostAndHowItEnded) {
  EXPECT_EQ(DescribeRankExit({2, "node-a", 1, 0}), "rank 2 on node-a exited with code 1");
  EXPECT_EQ(DescribeRankExit({2, "", 0, 9}), "rank 2 was killed by signal 9 (Killed)");
  EXPECT_EQ(DescribeRankExit({3, "node-b", -1, 0}),
            "rank 3 on node-b lost its session without leaving the job");
}

TEST(TensorRequestTest, ByteSize) {
  TensorRequest r;
  r.dtype = DataType::kFloat16;
  r.shape = {3, 5};
  EXPECT_EQ(r.ByteSize(), 30);
  r.shape = {};
  EXPECT_EQ(r.ByteSize(), 2);  // a scalar
  r.shape = {4, 0};
  EXPECT_EQ(r.ByteSize(), 0);
}

}  // namespace
}  // namespace troika
