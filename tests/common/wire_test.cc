#include "common/wire.h"

#include "gtest/gtest.h"

namespace troika {
namespace {

TensorRequest Gather(int rank, int64_t dim0) {
  TensorRequest r;
  r.rank = rank;
  r.name = "g";
  r.type = CollectiveType::kAllgather;
  r.dtype = DataType::kInt32;
  r.shape = {dim0, 3};
  return r;
}

TEST(WireTest, RequestRoundTrips) {
  TensorRequest r = Gather(2, 5);
  r.prescale = 0.5;
  v1::Request wire;
  ToWire(r, &wire);
  TensorRequest back = FromWire(wire);
  EXPECT_EQ(back.rank, 2);
  EXPECT_EQ(back.shape, r.shape);
  EXPECT_EQ(back.prescale, 0.5);
  EXPECT_EQ(back.type, CollectiveType::kAllgather);
}

TEST(WireTest, CompactedRequestExpandsToEveryRank) {
  v1::Request wire;
  ASSERT_TRUE(CompactToWire({Gather(4, 1), Gather(5, 7)}, &wire));
  std::vector<TensorRequest> out;
  ASSERT_TRUE(AppendFromWire(wire, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 4);
  EXPECT_EQ(out[1].rank, 5);
  EXPECT_EQ(out[1].shape, (std::vector<int64_t>{7, 3}));
}

TEST(WireTest, AlltoallSplitsSurviveCompaction) {
  TensorRequest a = Gather(0, 3), b = Gather(1, 2);
  a.type = b.type = CollectiveType::kAlltoall;
  a.splits = {1, 2};
  b.splits = {2, 0};
  v1::Request wire;
  ASSERT_TRUE(CompactToWire({a, b}, &wire));
  std::vector<TensorRequest> out;
  ASSERT_TRUE(AppendFromWire(wire, &out).ok());
  EXPECT_EQ(out[0].splits, a.splits);
  EXPECT_EQ(out[1].splits, b.splits);
}

TEST(WireTest, DisagreeingRequestsAreNotCompacted) {
  TensorRequest a = Gather(0, 3), b = Gather(1, 3);
  b.shape[1] = 4;  // the coordinator must see both to report the mismatch
  v1::Request wire;
  EXPECT_FALSE(CompactToWire({a, b}, &wire));
  TensorRequest c = Gather(1, 3);
  c.type = CollectiveType::kAllreduce;
  c.shape = {4, 3};
  a.type = CollectiveType::kAllreduce;  // allreduce: dim 0 must agree too
  EXPECT_FALSE(CompactToWire({a, c}, &wire));
}

TEST(WireTest, MalformedCompactedRequestIsRejected) {
  v1::Request wire;
  ASSERT_TRUE(CompactToWire({Gather(0, 1), Gather(1, 2)}, &wire));
  wire.add_dim0s(9);  // three dim 0s for two ranks
  std::vector<TensorRequest> out;
  EXPECT_EQ(AppendFromWire(wire, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, RestartFieldsOfDownMessagesRoundTrip) {
  DownMessage numbered;
  numbered.seq = 42;
  numbered.responses.resize(2);
  numbered.resumed = true;
  v1::Down wire;
  ToWire(numbered, &wire);
  DownMessage back = FromWire(wire);
  EXPECT_EQ(back.seq, 42);
  EXPECT_EQ(back.responses.size(), 2u);
  EXPECT_TRUE(back.resumed);

  DownMessage ask;
  ask.replay_from = 3;
  ask.replay_to = 9;
  wire.Clear();
  ToWire(ask, &wire);
  ASSERT_TRUE(wire.has_replay());
  back = FromWire(wire);
  EXPECT_EQ(back.replay_from, 3);
  EXPECT_EQ(back.replay_to, 9);
  EXPECT_TRUE(back.responses.empty());
}

TEST(WireTest, WaitStateRoundTrips) {
  v1::WaitState wire;
  ToWire(WaitState{3, {"grad/a", "grad/b"}}, &wire);
  WaitState back = FromWire(wire);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.waiting_for, (std::vector<std::string>{"grad/a", "grad/b"}));
  ToWire(WaitState{1, {}}, &wire);
  EXPECT_TRUE(FromWire(wire).waiting_for.empty());
}

}  // namespace
}  // namespace troika
