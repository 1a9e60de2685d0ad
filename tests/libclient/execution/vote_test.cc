// The vote of scheduled allreduces (CollectiveRunner, docs/protocol.md, Schedules): for every
// dtype and reduce op, one rank voting void makes the allreduce void on every rank, leaving
// every output untouched; all voting go reduces as usual. Inline (<= 1 MiB, trailing
// elements; one per 127 ranks for 8-bit sums) and as a separate allreduce (larger).

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "libclient/execution/collective_runner.h"
#include "libclient/execution/output_pool.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/memory/memory_transport.h"

namespace troika::internal {
namespace {

using Vote = CollectiveRunner::Vote;

std::vector<std::unique_ptr<transport::Communicator>> Connect(int n) {
  static auto transport = std::make_shared<transport::MemoryTransport>();
  static transport::InMemoryStore store;
  static int group = 0;
  const std::string prefix = "vote/" + std::to_string(group++) + "/";
  std::vector<std::unique_ptr<transport::Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c = transport->Connect({.rank = r, .size = n, .store_prefix = prefix}, store);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Every rank allreduces two tensors of `elements` each (a fused entry) of `dtype` with `op`,
// every byte 0x01 (1 for integers and bool, tiny for floats); `void_rank` votes void (-1:
// none, -2: every rank). Returns each rank's combined vote; checks what the outputs hold.
std::vector<Vote> RunVote(int n, DataType dtype, ReduceOp op, int64_t elements, int void_rank) {
  auto comms = Connect(n);
  std::vector<Vote> votes(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto pool = OutputPool::Create(0);
      CollectiveRunner runner(*pool);
      Response response;
      response.names = {"a", "b"};
      response.dtype = dtype;
      response.reduce_op = op;
      const size_t bytes = static_cast<size_t>(elements) * DataTypeSize(dtype);
      std::vector<uint8_t> in(bytes, 0x01);
      std::vector<std::vector<uint8_t>> out(2, std::vector<uint8_t>(bytes, 0xEE));
      std::vector<Entry> entries(2);
      for (int i = 0; i < 2; ++i) {
        entries[i].request.name = response.names[i];
        entries[i].request.dtype = dtype;
        entries[i].request.shape = {elements};
        entries[i].in = in.data();
        entries[i].out = out[i].data();
      }
      votes[r] = r == void_rank || void_rank == -2 ? Vote::kVoid : Vote::kGo;
      ASSERT_TRUE(runner.Run(*comms[r], response, absl::MakeSpan(entries), &votes[r]).ok());
      for (int i = 0; i < 2; ++i) {
        const bool untouched = out[i] == std::vector<uint8_t>(bytes, 0xEE);
        EXPECT_EQ(untouched, votes[r] == Vote::kVoid) << "rank " << r << " tensor " << i;
      }
    });
  }
  for (auto& t : threads) t.join();
  return votes;
}

constexpr DataType kTypes[] = {DataType::kUint8,   DataType::kInt8,     DataType::kInt16,
                               DataType::kUint16,  DataType::kInt32,    DataType::kInt64,
                               DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

TEST(VoteTest, OneVoidMakesEveryRankVoidForEveryDtypeAndOp) {
  for (DataType dtype : kTypes) {
    for (ReduceOp op : kOps) {
      for (int void_rank : {-1, 0, 2}) {
        std::vector<Vote> votes = RunVote(3, dtype, op, 5, void_rank);
        for (int r = 0; r < 3; ++r) {
          EXPECT_EQ(votes[r], void_rank < 0 ? Vote::kGo : Vote::kVoid)
              << "dtype " << static_cast<int>(dtype) << " op " << static_cast<int>(op)
              << " void rank " << void_rank << ", rank " << r;
        }
      }
    }
  }
}

TEST(VoteTest, EightBitSumsOfManyRanksNeverWrapAVoidToGo) {
  // 256 voids of 1 would sum to 0 in one byte: one element per 127 ranks.
  for (DataType dtype : {DataType::kUint8, DataType::kInt8}) {
    for (int void_rank : {-1, 0, 200, -2}) {
      std::vector<Vote> votes = RunVote(256, dtype, ReduceOp::kSum, 1, void_rank);
      for (Vote v : votes) EXPECT_EQ(v, void_rank == -1 ? Vote::kGo : Vote::kVoid);
    }
  }
}

TEST(VoteTest, EntriesOverOneMebibyteVoteInAnAllreduceOfTheirOwn) {
  const int64_t elements = (kInlineVoteBytes / 4 / 2) + 1;  // two float32 tensors > 1 MiB
  for (int void_rank : {-1, 1}) {
    std::vector<Vote> votes = RunVote(2, DataType::kFloat32, ReduceOp::kSum, elements, void_rank);
    for (Vote v : votes) EXPECT_EQ(v, void_rank < 0 ? Vote::kGo : Vote::kVoid);
  }
}

}  // namespace
}  // namespace troika::internal
