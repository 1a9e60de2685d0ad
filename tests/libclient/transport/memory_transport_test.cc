#include "libclient/transport/memory/memory_transport.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "libclient/transport/memory/in_memory_store.h"
#include "tests/libclient/transport/collective_checks.h"

// What only the memory transport does. The collective matrix runs over every transport in
// collectives_test.cc, and what every transport does in transport_conformance_test.cc.

namespace troika::transport {
namespace {

using conformance::Comms;
using conformance::ConnectGroup;

class MemoryTransportTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryTransport> transport_ = std::make_shared<MemoryTransport>();
  InMemoryStore store_;
};

// Under ASan or TSan: a rank whose call fails must not return (and let its caller free the
// buffer) while a peer still copies from that buffer.
TEST_F(MemoryTransportTest, AbortMidCollectiveNeverLeavesPeersReadingFreedBuffers) {
  for (int round = 0; round < 5; ++round) {
    Comms comms = ConnectGroup(*transport_, store_, 3, "abort-mid/" + std::to_string(round) + "/");
    ASSERT_EQ(comms.size(), 3u);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 3 * round));
      comms[1]->Abort();
    });
    conformance::OnEveryRank(comms, [&](int r) {
      absl::Status status;
      while (status.ok()) {
        auto data = std::make_unique<std::vector<float>>(1 << 16, 1.0f);
        status =
            comms[r]->Allreduce(data->data(), data->size(), DataType::kFloat32, ReduceOp::kSum);
      }
      EXPECT_TRUE(absl::IsCancelled(status)) << status;
    });
    aborter.join();
  }
}

TEST_F(MemoryTransportTest, ConnectTimesOutNamingTheMissingRanks) {
  absl::Status late_status;
  std::thread rank2([&] {
    CommunicatorSpec spec{
        .rank = 2, .size = 3, .store_prefix = "late/", .timeout = absl::Milliseconds(800)};
    late_status = transport_->Connect(spec, store_).status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Let rank 2 join first.
  const absl::Status status =
      transport_
          ->Connect(
              {.rank = 0, .size = 3, .store_prefix = "late/", .timeout = absl::Milliseconds(200)},
              store_)
          .status();
  rank2.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_NE(status.message().find("only 2 of 3 ranks joined"), std::string::npos) << status;
  EXPECT_NE(status.message().find("missing ranks: [1]"), std::string::npos) << status;
  EXPECT_TRUE(absl::IsDeadlineExceeded(late_status)) << late_status;
  EXPECT_NE(late_status.message().find("missing ranks: [0,1]"), std::string::npos) << late_status;
}

// Two ranks of one prefix that disagree on its size: whichever joins second is refused at
// once, and the first waits for its group until it times out. Either may come first. (Bad
// ranks and sizes are refused by every transport: transport_conformance_test.cc.)
TEST_F(MemoryTransportTest, ConnectRefusesARankThatDisagreesOnTheGroupSize) {
  auto connect = [&](int rank, int size) {
    const CommunicatorSpec spec{
        .rank = rank, .size = size, .store_prefix = "mix/", .timeout = absl::Milliseconds(300)};
    return transport_->Connect(spec, store_).status();
  };
  absl::Status of_two;
  std::thread first([&] { of_two = connect(0, 2); });
  const absl::Status of_three = connect(1, 3);
  first.join();
  const bool two_first = absl::IsInvalidArgument(of_three);
  const absl::Status& refused = two_first ? of_three : of_two;
  const absl::Status& waited = two_first ? of_two : of_three;
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("joins group 'mix/' with size"), std::string::npos) << refused;
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
}

TEST_F(MemoryTransportTest, MismatchedArgumentsFailOnEveryRank) {
  Comms comms = ConnectGroup(*transport_, store_, 2, "mismatch/");
  ASSERT_EQ(comms.size(), 2u);
  conformance::OnEveryRank(comms, [&](int r) {
    std::vector<float> data(5, 1.0f);
    const absl::Status status =
        comms[r]->Allreduce(data.data(), r == 0 ? 4 : 5, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_NE(status.message().find("rank 1 called allreduce"), std::string::npos) << status;
    EXPECT_FALSE(comms[r]->Barrier().ok());
  });
}

TEST_F(MemoryTransportTest, GroupsWithDifferentPrefixesAreIndependent) {
  Comms a, b;
  std::thread connect_a([&] { a = ConnectGroup(*transport_, store_, 2, "group/a/"); });
  b = ConnectGroup(*transport_, store_, 3, "group/b/");
  connect_a.join();
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 3u);
  std::thread run_a([&] { conformance::CheckInterleavedCollectives(a); });
  conformance::CheckInterleavedCollectives(b);
  run_a.join();
}

TEST_F(MemoryTransportTest, PrefixCanBeReusedOnceItsGroupIsComplete) {
  Comms first = ConnectGroup(*transport_, store_, 2, "reuse/");
  ASSERT_EQ(first.size(), 2u);
  Comms second = ConnectGroup(*transport_, store_, 2, "reuse/");
  ASSERT_EQ(second.size(), 2u);
  first[0]->Abort();  // Breaks the first group only.
  conformance::CheckInterleavedCollectives(second);
}

}  // namespace
}  // namespace troika::transport
