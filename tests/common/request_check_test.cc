#include "common/request_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika {
namespace {

using ::testing::HasSubstr;

TensorRequest Make(CollectiveType type, std::vector<int64_t> shape) {
  TensorRequest r;
  r.name = "t";
  r.type = type;
  r.shape = std::move(shape);
  return r;
}

TEST(RequestCheckTest, AcceptsWellFormedRequests) {
  EXPECT_TRUE(CheckRequest(Make(CollectiveType::kAllreduce, {}), 1).ok());
  EXPECT_TRUE(CheckRequest(Make(CollectiveType::kAllgather, {0, 3}), 4).ok());
  TensorRequest a2a = Make(CollectiveType::kAlltoall, {5});
  a2a.splits = {2, 3};
  EXPECT_TRUE(CheckRequest(a2a, 2).ok());
  TensorRequest compressed = Make(CollectiveType::kAllreduce, {8});
  compressed.device = DeviceClass::kGpu;
  compressed.compression = Compression::kBFloat16;
  EXPECT_TRUE(CheckRequest(compressed, 2).ok());
}

TEST(RequestCheckTest, CompressionOnlyForFloat32AllreducesOnGpu) {
  TensorRequest gpu = Make(CollectiveType::kAllreduce, {8});
  gpu.device = DeviceClass::kGpu;
  gpu.compression = Compression::kFloat16;
  TensorRequest cpu = gpu;
  cpu.device = DeviceClass::kCpu;
  TensorRequest f64 = gpu;
  f64.dtype = DataType::kFloat64;
  TensorRequest gather = gpu;
  gather.type = CollectiveType::kAllgather;
  for (const TensorRequest& r : {cpu, f64, gather}) {
    absl::Status s = CheckRequest(r, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr("compression float16 applies only to float32 allreduces on GPU"));
  }
  TensorRequest unknown = gpu;
  unknown.compression = static_cast<Compression>(7);
  EXPECT_THAT(CheckRequest(unknown, 1).message(), HasSubstr("unknown compression"));
}

// troika/types.h: bool reduces with sum, min, max and product (logical or / and); average and
// scale factors are rejected on the submitting rank.
TEST(RequestCheckTest, BoolReductionsExceptAverageAndScaling) {
  for (CollectiveType type : {CollectiveType::kAllreduce, CollectiveType::kReducescatter}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      TensorRequest r = Make(type, {4});
      r.dtype = DataType::kBool;
      r.reduce_op = op;
      const bool supported =
          type == CollectiveType::kAllreduce || op == ReduceOp::kSum;  // reducescatter: sum
      EXPECT_EQ(CheckRequest(r, 2).ok(), supported)
          << CollectiveName(type) << " " << ReduceOpName(op);
    }
    TensorRequest average = Make(type, {4});
    average.dtype = DataType::kBool;
    average.reduce_op = ReduceOp::kAverage;
    absl::Status s = CheckRequest(average, 2);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("reduce op average is not defined for bool tensors"));
    for (double TensorRequest::*factor : {&TensorRequest::prescale, &TensorRequest::postscale}) {
      TensorRequest scaled = Make(type, {4});
      scaled.dtype = DataType::kBool;
      scaled.*factor = 0.5;
      s = CheckRequest(scaled, 2);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(s.message(), HasSubstr("bool tensors cannot be scaled"));
    }
  }
  // Other collectives move bools as bytes, whatever their (unused) reduce op.
  for (CollectiveType type : {CollectiveType::kAllgather, CollectiveType::kBroadcast}) {
    TensorRequest r = Make(type, {4});
    r.dtype = DataType::kBool;
    r.reduce_op = ReduceOp::kAverage;
    EXPECT_TRUE(CheckRequest(r, 2).ok()) << CollectiveName(type);
  }
  // The new integer types average and scale like the others.
  for (DataType dtype : {DataType::kInt16, DataType::kUint16}) {
    TensorRequest r = Make(CollectiveType::kAllreduce, {4});
    r.dtype = dtype;
    r.reduce_op = ReduceOp::kAverage;
    r.prescale = 0.5;
    EXPECT_TRUE(CheckRequest(r, 2).ok()) << DataTypeName(dtype);
  }
  TensorRequest unknown = Make(CollectiveType::kAllreduce, {4});
  unknown.dtype = static_cast<DataType>(kNumDataTypes);
  EXPECT_THAT(CheckRequest(unknown, 2).message(), HasSubstr("unknown dtype"));
}

TEST(RequestCheckTest, RejectsEachMalformedField) {
  struct Case {
    TensorRequest request;
    int size;
    std::string message;
  };
  TensorRequest bad_root = Make(CollectiveType::kBroadcast, {1});
  bad_root.root = 3;
  TensorRequest bad_splits = Make(CollectiveType::kAlltoall, {5});
  bad_splits.splits = {1, 1};
  TensorRequest short_splits = Make(CollectiveType::kAlltoall, {5});
  short_splits.splits = {5};
  TensorRequest rs_max = Make(CollectiveType::kReducescatter, {4});
  rs_max.reduce_op = ReduceOp::kMax;
  TensorRequest nan_scale = Make(CollectiveType::kAllreduce, {4});
  nan_scale.prescale = std::nan("");
  TensorRequest no_name = Make(CollectiveType::kAllreduce, {4});
  no_name.name = "";
  std::vector<Case> cases = {
      {bad_root, 2, "root rank 3 out of range"},
      {bad_splits, 2, "splits sum to 2 but dim 0 is 5"},
      {short_splits, 2, "has 1 splits for 2 ranks"},
      {Make(CollectiveType::kAlltoall, {5}), 2, "not divisible by 2"},
      {Make(CollectiveType::kAllgather, {}), 2, "at least one dimension"},
      {rs_max, 2, "reduce op max is not supported"},
      {Make(CollectiveType::kAllreduce, {2, -1}), 2, "negative dimension"},
      {nan_scale, 2, "finite"},
      {no_name, 2, "name must not be empty"},
  };
  for (const Case& c : cases) {
    absl::Status s = CheckRequest(c.request, c.size);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace troika

namespace troika {
namespace {

TEST(RequestCheckTest, UnknownSetSizeLeavesRanksRootsAndSplitCountsToTheCoordinator) {
  TensorRequest a2a = Make(CollectiveType::kAlltoall, {3});
  a2a.rank = 5;
  a2a.splits = {1, 2};
  EXPECT_TRUE(CheckRequest(a2a, 0).ok());
  EXPECT_FALSE(CheckRequest(a2a, 3).ok());  // known: 2 splits for 3 ranks
  a2a.splits = {1, 1};
  EXPECT_THAT(CheckRequest(a2a, 0).message(), HasSubstr("splits sum to 2 but dim 0 is 3"));
  TensorRequest even = Make(CollectiveType::kAlltoall, {3});
  EXPECT_TRUE(CheckRequest(even, 0).ok());
  TensorRequest broadcast = Make(CollectiveType::kBroadcast, {3});
  broadcast.root = 7;
  EXPECT_TRUE(CheckRequest(broadcast, 0).ok());
  broadcast.root = -1;
  EXPECT_FALSE(CheckRequest(broadcast, 0).ok());
}

}  // namespace
}  // namespace troika
