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
