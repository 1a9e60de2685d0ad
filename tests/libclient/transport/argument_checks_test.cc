#include "libclient/transport/argument_checks.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"

namespace troika::transport {
namespace {

TEST(CheckPerRankTest, AcceptsOneEntryPerRankAndNamesTheArgumentOtherwise) {
  const std::vector<size_t> three = {1, 2, 3};
  EXPECT_TRUE(CheckPerRank(three, 3, "counts").ok());
  EXPECT_TRUE(CheckPerRank({}, 0, "counts").ok());
  for (int size : {2, 4}) {
    const absl::Status status = CheckPerRank(three, size, "recv_bytes");
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(),
        absl::StrCat("recv_bytes has 3 entries; expected one per rank (", size, ")")))
        << status;
  }
}

TEST(CheckReductionTest, AcceptsEveryKnownDtypeAndOpAndRefusesOthers) {
  for (DataType dtype : {DataType::kFloat32, DataType::kInt8, DataType::kBool}) {
    for (int op = 0; op <= static_cast<int>(ReduceOp::kProduct); ++op) {
      EXPECT_TRUE(CheckReduction(dtype, static_cast<ReduceOp>(op)).ok()) << op;
    }
  }
  const absl::Status dtype = CheckReduction(static_cast<DataType>(99), ReduceOp::kSum);
  EXPECT_TRUE(absl::IsInvalidArgument(dtype)) << dtype;
  EXPECT_TRUE(absl::StrContains(dtype.message(), "unknown dtype 99")) << dtype;
  for (int op : {-1, static_cast<int>(ReduceOp::kProduct) + 1}) {
    const absl::Status status = CheckReduction(DataType::kFloat32, static_cast<ReduceOp>(op));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("unknown reduce op ", op)))
        << status;
  }
}

}  // namespace
}  // namespace troika::transport
