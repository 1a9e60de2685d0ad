#include "coordinator/negotiation/agreement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<TensorRequest> Uniform(int size, CollectiveType type, std::vector<int64_t> shape) {
  std::vector<TensorRequest> out(size);
  for (int r = 0; r < size; ++r) {
    out[r].rank = r;
    out[r].name = "grad/fc1";
    out[r].type = type;
    out[r].shape = shape;
  }
  return out;
}

TEST(AgreementTest, MismatchedShapesNameTensorRanksAndValues) {
  auto reqs = Uniform(4, CollectiveType::kAllreduce, {128, 64});
  reqs[3].shape = {128, 32};
  Response r = Agree(reqs);
  EXPECT_EQ(r.error,
            "Mismatched allreduce shapes for 'grad/fc1': ranks 0-2 sent [128,64], "
            "rank 3 sent [128,32]");
  EXPECT_THAT(r.names, ElementsAre("grad/fc1"));
}

TEST(AgreementTest, EveryFieldIsValidated) {
  struct Case {
    std::function<void(TensorRequest&)> change;
    CollectiveType type;
    std::string expected;
  };
  std::vector<Case> cases = {
      {[](auto& r) { r.type = CollectiveType::kBroadcast; }, CollectiveType::kAllreduce,
       "Mismatched allreduce operations for 'grad/fc1': rank 0 sent allreduce, rank 1 sent "
       "broadcast"},
      {[](auto& r) { r.dtype = DataType::kFloat16; }, CollectiveType::kAllreduce,
       "data types for 'grad/fc1': rank 0 sent float32, rank 1 sent float16"},
      {[](auto& r) { r.reduce_op = ReduceOp::kMax; }, CollectiveType::kAllreduce,
       "reduce ops for 'grad/fc1': rank 0 sent sum, rank 1 sent max"},
      {[](auto& r) { r.prescale = 2; }, CollectiveType::kAllreduce,
       "prescale factors for 'grad/fc1': rank 0 sent 1, rank 1 sent 2"},
      {[](auto& r) { r.postscale = 0.5; }, CollectiveType::kReducescatter,
       "postscale factors for 'grad/fc1': rank 0 sent 1, rank 1 sent 0.5"},
      {[](auto& r) { r.root = 1; }, CollectiveType::kBroadcast,
       "root ranks for 'grad/fc1': rank 0 sent 0, rank 1 sent 1"},
      {[](auto& r) { r.device = DeviceClass::kGpu; }, CollectiveType::kAllreduce,
       "device classes for 'grad/fc1': rank 0 sent cpu, rank 1 sent gpu"},
      {[](auto& r) { r.compression = Compression::kFloat16; }, CollectiveType::kAllreduce,
       "compressions for 'grad/fc1': rank 0 sent none, rank 1 sent float16"},
      {[](auto& r) {
         r.shape = {6, 3};
       },
       CollectiveType::kAllgather,
       "Mismatched allgather shapes for 'grad/fc1': rank 0 sent [*,2], rank 1 sent [*,3]"},
  };
  for (const Case& c : cases) {
    auto reqs = Uniform(2, c.type, {4, 2});
    c.change(reqs[1]);
    EXPECT_THAT(Agree(reqs).error, HasSubstr(c.expected));
  }
}

TEST(AgreementTest, AllgatherAllowsDifferentFirstDimensionAndReportsSizes) {
  auto reqs = Uniform(3, CollectiveType::kAllgather, {2, 5});
  reqs[1].shape = {0, 5};
  reqs[2].shape = {7, 5};
  Response r = Agree(reqs);
  EXPECT_FALSE(r.is_error()) << r.error;
  EXPECT_THAT(r.sizes, ElementsAre(2, 0, 7));
}

TEST(AgreementTest, AlltoallBuildsSplitMatrix) {
  auto reqs = Uniform(2, CollectiveType::kAlltoall, {4});
  reqs[1].shape = {3};
  reqs[1].splits = {1, 2};
  Response r = Agree(reqs);
  EXPECT_FALSE(r.is_error()) << r.error;
  EXPECT_THAT(r.splits, ElementsAre(2, 2, 1, 2));
}

TEST(AgreementTest, ReducescatterSplitsRowsAsEvenlyAsPossible) {
  Response r = Agree(Uniform(3, CollectiveType::kReducescatter, {7, 2}));
  EXPECT_THAT(r.sizes, ElementsAre(3, 2, 2));
}

}  // namespace
}  // namespace troika::coordinator
