#include "coordinator/negotiation/negotiator.h"

#include <string>
#include <vector>

#include "common/request_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using test_util::kT0;
using test_util::NoHold;
using test_util::PollNow;

TensorRequest Allreduce(int rank, std::string name, std::vector<int64_t> shape = {4},
                        DataType dtype = DataType::kFloat32) {
  TensorRequest r;
  r.rank = rank;
  r.name = std::move(name);
  r.type = CollectiveType::kAllreduce;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

TEST(NegotiatorTest, TensorIsReadyOnlyWhenEveryRankSubmitted) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(2, "a"), kT0).ok());
  EXPECT_THAT(PollNow(n), IsEmpty());
  ASSERT_EQ(n.Pending().size(), 1u);
  EXPECT_THAT(n.Pending()[0].missing_ranks, ElementsAre(1));
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("a"));
  EXPECT_FALSE(out[0].is_error());
  EXPECT_TRUE(n.idle());
}

TEST(NegotiatorTest, ReadyTensorExposesEachRanksArrivalTimeOnce) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0 + absl::Milliseconds(5)).ok());
  EXPECT_THAT(n.TakeReadyRecords(), IsEmpty());  // not ready yet
  ASSERT_TRUE(n.Submit(Allreduce(2, "a"), kT0 + absl::Milliseconds(9)).ok());
  std::vector<ReadyRecord> ready = n.TakeReadyRecords();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "a");
  EXPECT_EQ(ready[0].ready_at, kT0 + absl::Milliseconds(9));
  EXPECT_FALSE(ready[0].cached);
  EXPECT_THAT(ready[0].arrivals,
              ElementsAre(kT0 + absl::Milliseconds(5), kT0, kT0 + absl::Milliseconds(9)));
  EXPECT_THAT(n.TakeReadyRecords(), IsEmpty());
}

TEST(NegotiatorTest, OrderIsTheOrderTensorsBecameReady) {
  Negotiator n(2, NoHold());
  TensorRequest b0 = Allreduce(0, "b"), a0 = Allreduce(0, "a");
  b0.type = a0.type = CollectiveType::kBroadcast;  // not fusible: order is visible
  TensorRequest b1 = b0, a1 = a0;
  b1.rank = a1.rank = 1;
  ASSERT_TRUE(n.Submit(a0, kT0).ok());
  ASSERT_TRUE(n.Submit(b0, kT0).ok());
  ASSERT_TRUE(n.Submit(b1, kT0).ok());  // b ready first
  ASSERT_TRUE(n.Submit(a1, kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].names, ElementsAre("b"));
  EXPECT_THAT(out[1].names, ElementsAre("a"));
}

TEST(NegotiatorTest, CompatibleAllreducesFuseUpToThreshold) {
  NegotiatorOptions o = NoHold();
  o.fusion_threshold_bytes = 40;  // two 16-byte tensors fit, three do not
  Negotiator n(2, o);
  for (std::string name : {"a", "b", "c"}) {
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(n.Submit(Allreduce(r, name), kT0).ok());
  }
  // Fusion happens at poll time over everything ready.
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].names, ElementsAre("a", "b"));
  EXPECT_THAT(out[1].names, ElementsAre("c"));
}

TEST(NegotiatorTest, HostileNamesAndFloodsAreRefusedWithoutHarm) {
  NegotiatorOptions o = NoHold();
  o.max_pending_tensors = 3;
  Negotiator n(2, o);
  absl::Status long_name = n.Submit(Allreduce(0, std::string(kMaxNameBytes + 1, 'x')), kT0);
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_name.message(), HasSubstr("name of 1025 bytes"));
  EXPECT_TRUE(n.Submit(Allreduce(0, std::string(kMaxNameBytes, 'y')), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(1, std::string(kMaxNameBytes, 'y')), kT0).ok());
  ASSERT_EQ(PollNow(n).size(), 1u);
  TensorRequest long_group = Allreduce(0, "g0");
  long_group.group = std::string(kMaxNameBytes + 1, 'g');
  long_group.group_size = 1;
  EXPECT_EQ(n.Submit(long_group, kT0).code(), absl::StatusCode::kInvalidArgument);
  // Rank 0 floods names rank 1 never submits: the fourth pending one is refused.
  for (std::string name : {"a", "b", "c"}) ASSERT_TRUE(n.Submit(Allreduce(0, name), kT0).ok());
  absl::Status flood = n.Submit(Allreduce(0, "d"), kT0);
  EXPECT_EQ(flood.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(flood.message(), HasSubstr("--max_pending_tensors"));
  // A pending name still completes, which frees room; nothing refused was kept.
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("a"));
  EXPECT_EQ(n.Pending().size(), 2u);
  EXPECT_TRUE(n.Submit(Allreduce(0, "d"), kT0).ok());
}

TEST(NegotiatorTest, IncompatibleAllreducesAreNotFused) {
  Negotiator n(1, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(0, "f32"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "f64", {4}, DataType::kFloat64), kT0).ok());
  TensorRequest scaled = Allreduce(0, "scaled");
  scaled.postscale = 0.5;
  ASSERT_TRUE(n.Submit(scaled, kT0).ok());
  TensorRequest maxed = Allreduce(0, "max");
  maxed.reduce_op = ReduceOp::kMax;
  ASSERT_TRUE(n.Submit(maxed, kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "f32b"), kT0).ok());
  // GPU tensors never fuse with CPU ones, nor compressed with uncompressed.
  TensorRequest gpu = Allreduce(0, "gpu");
  gpu.device = DeviceClass::kGpu;
  TensorRequest gpu16 = gpu;
  gpu16.name = "gpu16";
  gpu16.compression = Compression::kFloat16;
  TensorRequest gpub = gpu;
  gpub.name = "gpub";
  for (const TensorRequest& r : {gpu, gpu16, gpub}) ASSERT_TRUE(n.Submit(r, kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_THAT(out[0].names, ElementsAre("f32", "f32b"));
  EXPECT_THAT(out[1].names, ElementsAre("f64"));
  EXPECT_THAT(out[2].names, ElementsAre("scaled"));
  EXPECT_THAT(out[3].names, ElementsAre("max"));
  EXPECT_THAT(out[4].names, ElementsAre("gpu", "gpub"));
  EXPECT_EQ(out[4].device, DeviceClass::kGpu);
  EXPECT_THAT(out[5].names, ElementsAre("gpu16"));
  EXPECT_EQ(out[5].compression, Compression::kFloat16);
}

TEST(NegotiatorTest, ZeroThresholdDisablesFusion) {
  NegotiatorOptions o = NoHold();
  o.fusion_threshold_bytes = 0;
  Negotiator n(1, o);
  ASSERT_TRUE(n.Submit(Allreduce(0, "a", {0}), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "b", {0}), kT0).ok());
  EXPECT_EQ(PollNow(n).size(), 2u);
}

TEST(NegotiatorTest, HoldsReadyAllreduceForCycleTimeWhileOthersArrive) {
  NegotiatorOptions o;
  o.cycle_time = absl::Milliseconds(5);
  Negotiator n(2, o);
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "b"), kT0).ok());  // b partially submitted
  absl::Time next;
  EXPECT_THAT(n.Poll(kT0 + absl::Milliseconds(1), &next), IsEmpty());
  EXPECT_EQ(next, kT0 + absl::Milliseconds(5));
  ASSERT_TRUE(n.Submit(Allreduce(1, "b"), kT0 + absl::Milliseconds(2)).ok());
  // Nothing is partially submitted any more: flushed at once, fused.
  std::vector<Response> out = n.Poll(kT0 + absl::Milliseconds(2), &next);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("a", "b"));
  EXPECT_EQ(next, absl::InfiniteFuture());
}

TEST(NegotiatorTest, HeldAllreduceIsReleasedAtCycleDeadline) {
  NegotiatorOptions o;
  o.cycle_time = absl::Milliseconds(5);
  Negotiator n(2, o);
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "b"), kT0).ok());
  absl::Time next;
  EXPECT_THAT(n.Poll(kT0 + absl::Milliseconds(4), &next), IsEmpty());
  std::vector<Response> out = n.Poll(kT0 + absl::Milliseconds(5), &next);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].names, ElementsAre("a"));
}

TEST(NegotiatorTest, DuplicateNameInFlightOnARankIsRejected) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0).ok());
  absl::Status s = n.Submit(Allreduce(0, "a"), kT0);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("'a'"));
  // The first submission still counts.
  ASSERT_TRUE(n.Submit(Allreduce(1, "a"), kT0).ok());
  EXPECT_EQ(PollNow(n).size(), 1u);
}

TEST(NegotiatorTest, MalformedRequestIsRejected) {
  Negotiator n(2, NoHold());
  EXPECT_EQ(n.Submit(Allreduce(5, "a"), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n.Submit(Allreduce(0, ""), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n.Submit(Allreduce(0, "neg", {-1}), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(n.idle());
}

TEST(NegotiatorTest, MismatchBecomesErrorForTheTensorAndJobGoesOn) {
  Negotiator n(2, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(0, "a", {4}), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(1, "a", {5}), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(0, "b"), kT0).ok());
  ASSERT_TRUE(n.Submit(Allreduce(1, "b"), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].is_error());
  EXPECT_THAT(out[0].error, HasSubstr("'a'"));
  EXPECT_FALSE(out[1].is_error());  // an error is never fused with good tensors
  EXPECT_THAT(out[1].names, ElementsAre("b"));
}

TEST(NegotiatorTest, DepartedRankFailsPendingAndLaterTensors) {
  Negotiator n(3, NoHold());
  ASSERT_TRUE(n.Submit(Allreduce(0, "a"), kT0).ok());
  // Submitted by the departing rank itself: it will never execute it, so this fails too.
  ASSERT_TRUE(n.Submit(Allreduce(2, "held"), kT0).ok());
  n.RemoveRank(2, "has shut down");
  EXPECT_TRUE(n.Pending().empty());
  ASSERT_TRUE(n.Submit(Allreduce(1, "later"), kT0).ok());
  std::vector<Response> out = PollNow(n);
  ASSERT_EQ(out.size(), 3u);
  for (const Response& r : out) {
    EXPECT_TRUE(r.is_error());
    EXPECT_THAT(r.error, HasSubstr("rank 2 has shut down"));
  }
  EXPECT_THAT(out[2].names, ElementsAre("later"));
}

}  // namespace
}  // namespace troika::coordinator
