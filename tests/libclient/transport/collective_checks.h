#pragma once
// Transport-independent conformance checks for Communicator implementations: every rank of
// a group runs as a thread, every collective is checked element by element against a
// reference computed in double. Each test file connects groups with its own transport and
// calls these checks from its TEST_Ps. The *OnRank variants check one rank, for transports
// whose ranks are processes (each process calls them with its own communicator).
// Header-only.
//
// The reduction inputs are small integers chosen so that every partial result is exact in
// every dtype, whatever order a transport reduces in; results are compared for equality.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "libclient/transport/communicator.h"
#include "libclient/transport/transport.h"
#include "tests/libclient/transport/typed_buffer.h"

namespace troika::transport::conformance {

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs body(rank) on one thread per rank and joins them. If any rank fails the test, every
// rank aborts its communicator so that the others stop waiting for it.
inline void OnEveryRank(Comms& comms, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(comms.size()); ++r) {
    threads.emplace_back([&, r] {
      body(r);
      if (::testing::Test::HasFailure()) comms[r]->Abort();
    });
  }
  for (std::thread& t : threads) t.join();
}

// Connects ranks 0..n-1 of one group concurrently.
inline Comms ConnectGroup(Transport& transport, Store& store, int n, const std::string& prefix,
                          absl::Duration timeout = absl::Seconds(20)) {
  Comms comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorSpec spec{.rank = r, .size = n, .store_prefix = prefix, .timeout = timeout};
      absl::StatusOr<std::unique_ptr<Communicator>> comm = transport.Connect(spec, store);
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = std::move(*comm);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (comms[r] == nullptr) return {};
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), n);
  }
  return comms;
}

// Rank `rank`'s input element i: products stay within {-2..2}, sums within [-32, 64]. Bools
// are mostly true for product and min (and), mostly false for sum and max (or), so that both
// outcomes occur.
inline double InputValue(DataType dtype, ReduceOp op, int rank, size_t i) {
  if (dtype == DataType::kBool) {
    const bool rare = (i * 7 + static_cast<size_t>(rank) * 3) % 5 == 0;
    const bool conjunction = op == ReduceOp::kProduct || op == ReduceOp::kMin;
    return rare != conjunction ? 1 : 0;
  }
  if (op == ReduceOp::kProduct) {
    const size_t k = (i * 7 + static_cast<size_t>(rank) * 3) % 11;  // 0 for at most one rank
    if (k == 0) return 2;
    return (k == 1 && !IsUnsigned(dtype)) ? -1 : 1;
  }
  const int v = static_cast<int>((i * 31 + static_cast<size_t>(rank) * 17) % 9);
  return IsUnsigned(dtype) ? v : v - 4;
}

inline TypedBuffer Input(DataType dtype, ReduceOp op, int rank, size_t count) {
  TypedBuffer buffer(dtype, count);
  for (size_t i = 0; i < count; ++i) buffer.Set(i, InputValue(dtype, op, rank, i));
  return buffer;
}

inline TypedBuffer Reference(DataType dtype, ReduceOp op, int n, size_t count) {
  TypedBuffer buffer(dtype, count);
  for (size_t i = 0; i < count; ++i) {
    double v = InputValue(dtype, op, 0, i);
    for (int r = 1; r < n; ++r) v = ReferenceOp(op, v, InputValue(dtype, op, r, i));
    buffer.Set(i, v);
  }
  return buffer;
}

struct ReduceCase {
  DataType dtype;
  ReduceOp op;
  size_t count;
};

// Every dtype and op at sizes 0, 1, odd (7: fewer elements than ranks for some groups) and
// above 16 KiB, every dtype at >= 1 MiB, plus large float32 and float64 and a 256 KiB float32.
inline std::vector<ReduceCase> ReduceCases() {
  std::vector<ReduceCase> cases;
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      // 2, 4 and 8 elements: 2-8 bytes, which Gloo reduces as one wide element.
      for (size_t count : {0, 1, 2, 4, 7, 8, 1001}) {
        cases.push_back({dtype, op, count});
      }
    }
  }
  // More than 16 KiB in every dtype and op (past the shared-memory transport's one-barrier
  // path), and >= 1 MiB (several of its pieces) in every dtype, the ops in turn.
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) cases.push_back({dtype, op, 16411});
  }
  for (size_t i = 0; i < std::size(kAllDataTypes); ++i) {
    const DataType dtype = kAllDataTypes[i];
    cases.push_back({dtype, kAllReduceOps[i % std::size(kAllReduceOps)],
                     (size_t{1} << 20) / DataTypeSize(dtype) + 2 * i + 1});
  }
  cases.push_back({DataType::kFloat32, ReduceOp::kSum, (size_t{1} << 18) + 3});
  cases.push_back({DataType::kFloat32, ReduceOp::kMin, (size_t{1} << 16) + 1});
  cases.push_back({DataType::kFloat64, ReduceOp::kMax, (size_t{1} << 17) + 5});
  return cases;
}

// The results of ReduceCases() in a group of n.
inline std::vector<TypedBuffer> AllreduceExpected(int n) {
  std::vector<TypedBuffer> expected;
  for (const ReduceCase& c : ReduceCases()) {
    expected.push_back(Reference(c.dtype, c.op, n, c.count));
  }
  return expected;
}

inline void CheckAllreduceOnRank(Communicator& comm, const std::vector<TypedBuffer>& expected) {
  const int r = comm.rank();
  const std::vector<ReduceCase> cases = ReduceCases();
  for (size_t k = 0; k < cases.size(); ++k) {
    const ReduceCase& c = cases[k];
    TypedBuffer data = Input(c.dtype, c.op, r, c.count);
    const absl::Status status = comm.Allreduce(data.data(), c.count, c.dtype, c.op);
    ASSERT_TRUE(status.ok()) << status;
    for (size_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(data.Get(i), expected[k].Get(i))
          << TypeOpName(c.dtype, c.op) << " count " << c.count << " rank " << r << " elem " << i;
    }
  }
}

// AllreduceInto with a separate output: the output (filled with 0x5a bytes first) holds the
// reduction and the input is left as it was.
inline void CheckAllreduceIntoOnRank(Communicator& comm, const std::vector<TypedBuffer>& expected) {
  const int r = comm.rank();
  const std::vector<ReduceCase> cases = ReduceCases();
  for (size_t k = 0; k < cases.size(); ++k) {
    const ReduceCase& c = cases[k];
    const TypedBuffer in = Input(c.dtype, c.op, r, c.count);
    TypedBuffer out(c.dtype, c.count);
    if (out.bytes() > 0) std::memset(out.data(), 0x5a, out.bytes());
    const absl::Status status = comm.AllreduceInto(in.data(), out.data(), c.count, c.dtype, c.op);
    ASSERT_TRUE(status.ok()) << status;
    const TypedBuffer unchanged = Input(c.dtype, c.op, r, c.count);
    for (size_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(out.Get(i), expected[k].Get(i))
          << TypeOpName(c.dtype, c.op) << " count " << c.count << " rank " << r << " elem " << i;
      ASSERT_EQ(in.Get(i), unchanged.Get(i))
          << "input changed: " << TypeOpName(c.dtype, c.op) << " count " << c.count << " rank " << r
          << " elem " << i;
    }
  }
}

inline void CheckAllreduceInto(Comms& comms) {
  const std::vector<TypedBuffer> expected = AllreduceExpected(static_cast<int>(comms.size()));
  OnEveryRank(comms, [&](int r) { CheckAllreduceIntoOnRank(*comms[r], expected); });
}

inline void CheckAllreduce(Comms& comms) {
  const std::vector<TypedBuffer> expected = AllreduceExpected(static_cast<int>(comms.size()));
  OnEveryRank(comms, [&](int r) { CheckAllreduceOnRank(*comms[r], expected); });
}

// Per-rank block sizes: uneven with zeros and an odd block, all empty, and large blocks.
inline std::vector<std::vector<size_t>> BlockPatterns(int n, size_t large) {
  std::vector<size_t> uneven(n), empty(n, 0), big(n);
  for (int r = 0; r < n; ++r) {
    uneven[r] = r % 3 == 1 ? 0 : 1 + (static_cast<size_t>(r) * 37) % 50;
    big[r] = large + static_cast<size_t>(r) * 3;
  }
  uneven[n - 1] = 1001;
  return {uneven, empty, big};
}

struct ReduceScatterCase {
  DataType dtype;
  ReduceOp op;
  std::vector<size_t> counts;
};

inline std::vector<ReduceScatterCase> ReduceScatterCases(int n) {
  using Case = ReduceScatterCase;
  const auto patterns = BlockPatterns(n, 300007);
  std::vector<Case> cases;
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      cases.push_back({dtype, op, patterns[0]});
      cases.push_back({dtype, op, std::vector<size_t>(n, 1)});
    }
  }
  cases.push_back({DataType::kInt8, ReduceOp::kSum, patterns[1]});
  cases.push_back({DataType::kFloat32, ReduceOp::kSum, patterns[2]});
  cases.push_back({DataType::kFloat16, ReduceOp::kMin, patterns[2]});
  return cases;
}

// The results of ReduceScatterCases(n).
inline std::vector<TypedBuffer> ReduceScatterExpected(int n) {
  std::vector<TypedBuffer> expected;
  for (const ReduceScatterCase& c : ReduceScatterCases(n)) {
    const size_t total = std::accumulate(c.counts.begin(), c.counts.end(), size_t{0});
    expected.push_back(Reference(c.dtype, c.op, n, total));
  }
  return expected;
}

inline void CheckReduceScatterOnRank(Communicator& comm, const std::vector<TypedBuffer>& expected) {
  const int r = comm.rank();
  const std::vector<ReduceScatterCase> cases = ReduceScatterCases(comm.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const ReduceScatterCase& c = cases[k];
    const size_t total = std::accumulate(c.counts.begin(), c.counts.end(), size_t{0});
    TypedBuffer data = Input(c.dtype, c.op, r, total);
    const absl::Status status = comm.ReduceScatter(data.data(), c.counts, c.dtype, c.op);
    ASSERT_TRUE(status.ok()) << status;
    const size_t begin = std::accumulate(c.counts.begin(), c.counts.begin() + r, size_t{0});
    for (size_t i = begin; i < begin + c.counts[r]; ++i) {
      ASSERT_EQ(data.Get(i), expected[k].Get(i))
          << TypeOpName(c.dtype, c.op) << " case " << k << " rank " << r << " elem " << i;
    }
  }
}

inline void CheckReduceScatter(Comms& comms) {
  const std::vector<TypedBuffer> expected = ReduceScatterExpected(static_cast<int>(comms.size()));
  OnEveryRank(comms, [&](int r) { CheckReduceScatterOnRank(*comms[r], expected); });
}

inline uint8_t PatternByte(int a, int b, size_t j) {
  return static_cast<uint8_t>((a * 151 + b * 29 + j * 13 + (j >> 8)) ^ 0x5a);
}

inline void CheckAllgathervOnRank(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  auto patterns = BlockPatterns(n, (size_t{1} << 20) / n + 1);
  patterns.push_back(std::vector<size_t>(n, 1));
  for (const std::vector<size_t>& sizes : patterns) {
    for (bool in_place : {false, true}) {
      const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
      const size_t offset = std::accumulate(sizes.begin(), sizes.begin() + r, size_t{0});
      std::vector<uint8_t> out(total + 1, 0xee), in(sizes[r] + 1);
      uint8_t* mine = in_place ? out.data() + offset : in.data();
      for (size_t j = 0; j < sizes[r]; ++j) mine[j] = PatternByte(r, 0, j);
      const absl::Status status = comm.Allgatherv(mine, out.data(), sizes);
      ASSERT_TRUE(status.ok()) << status;
      size_t at = 0;
      for (int q = 0; q < n; ++q) {
        for (size_t j = 0; j < sizes[q]; ++j, ++at) {
          ASSERT_EQ(out[at], PatternByte(q, 0, j))
              << "rank " << r << " from " << q << " byte " << j << (in_place ? " in place" : "");
        }
      }
    }
  }
}

inline void CheckAllgatherv(Comms& comms) {
  OnEveryRank(comms, [&](int r) { CheckAllgathervOnRank(*comms[r]); });
}

inline void CheckBroadcastOnRank(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, (size_t{1} << 20) + 7}) {
    for (int root = 0; root < n; ++root) {
      if (bytes > 1001 && root != n - 1) continue;  // One large broadcast is enough.
      std::vector<uint8_t> data(bytes + 1, 0xee);
      if (r == root) {
        for (size_t j = 0; j < bytes; ++j) data[j] = PatternByte(root, 1, j);
      }
      const absl::Status status = comm.Broadcast(data.data(), bytes, root);
      ASSERT_TRUE(status.ok()) << status;
      for (size_t j = 0; j < bytes; ++j) {
        ASSERT_EQ(data[j], PatternByte(root, 1, j)) << "rank " << r << " root " << root;
      }
    }
  }
}

inline void CheckBroadcast(Comms& comms) {
  OnEveryRank(comms, [&](int r) { CheckBroadcastOnRank(*comms[r]); });
}

// Bytes rank s sends to rank d in each alltoallv pattern.
inline size_t AlltoallBytes(int pattern, int s, int d, int n) {
  switch (pattern) {
    case 0:
      return 0;
    case 1:
      return (s + d) % 4 == 0 ? 0 : ((s + 1) * (d + 3) * 37) % 300 + 1;
    default:
      return (size_t{1} << 20) / n + static_cast<size_t>(s * 7 + d);
  }
}

inline void CheckAlltoallvOnRank(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::vector<size_t> send(n), recv(n);
    for (int q = 0; q < n; ++q) {
      send[q] = AlltoallBytes(pattern, r, q, n);
      recv[q] = AlltoallBytes(pattern, q, r, n);
    }
    std::vector<uint8_t> in(std::accumulate(send.begin(), send.end(), size_t{0}) + 1);
    std::vector<uint8_t> out(std::accumulate(recv.begin(), recv.end(), size_t{0}) + 1, 0xee);
    size_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t j = 0; j < send[q]; ++j) in[at++] = PatternByte(r, q, j);
    }
    const absl::Status status = comm.Alltoallv(in.data(), send, out.data(), recv);
    ASSERT_TRUE(status.ok()) << status;
    at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t j = 0; j < recv[q]; ++j, ++at) {
        ASSERT_EQ(out[at], PatternByte(q, r, j))
            << "pattern " << pattern << " rank " << r << " from " << q << " byte " << j;
      }
    }
  }
}

inline void CheckAlltoallv(Comms& comms) {
  OnEveryRank(comms, [&](int r) { CheckAlltoallvOnRank(*comms[r]); });
}

inline void CheckBarrier(Comms& comms) {
  const int n = static_cast<int>(comms.size());
  std::atomic<int> arrived{0};
  OnEveryRank(comms, [&](int r) {
    for (int round = 0; round < 5; ++round) {
      // Late ranks make an early return from Barrier() visible.
      std::this_thread::sleep_for(std::chrono::milliseconds(r == n - 1 ? 20 : 0));
      arrived.fetch_add(1);
      const absl::Status status = comms[r]->Barrier();
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_GE(arrived.load(), (round + 1) * n)
          << "rank " << r << " left barrier " << round << " before every rank entered it";
    }
  });
}

// Different collectives back to back, many times: transfers of one must never be matched
// with another's.
inline void CheckInterleavedCollectivesOnRank(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (int iter = 0; iter < 20; ++iter) {
    int64_t sum = r + iter;
    ASSERT_TRUE(comm.Allreduce(&sum, 1, DataType::kInt64, ReduceOp::kSum).ok());
    ASSERT_EQ(sum, static_cast<int64_t>(n) * (n - 1) / 2 + static_cast<int64_t>(n) * iter);
    std::vector<int32_t> blocks(n, r + 1);
    const std::vector<size_t> ones(n, 1);
    ASSERT_TRUE(comm.ReduceScatter(blocks.data(), ones, DataType::kInt32, ReduceOp::kMax).ok());
    ASSERT_EQ(blocks[r], n);
    int32_t root_value = r == iter % n ? 1000 + iter : -1;
    ASSERT_TRUE(comm.Broadcast(&root_value, sizeof(root_value), iter % n).ok());
    ASSERT_EQ(root_value, 1000 + iter);
    std::vector<int32_t> ranks(n, -1);
    const std::vector<size_t> four(n, sizeof(int32_t));
    ASSERT_TRUE(comm.Allgatherv(&r, ranks.data(), four).ok());
    for (int q = 0; q < n; ++q) ASSERT_EQ(ranks[q], q);
    std::vector<int32_t> to(n), from(n, -1);
    for (int q = 0; q < n; ++q) to[q] = r * 100 + q;
    ASSERT_TRUE(comm.Alltoallv(to.data(), four, from.data(), four).ok());
    for (int q = 0; q < n; ++q) ASSERT_EQ(from[q], q * 100 + r);
    ASSERT_TRUE(comm.Barrier().ok());
  }
}

inline void CheckInterleavedCollectives(Comms& comms) {
  OnEveryRank(comms, [&](int r) { CheckInterleavedCollectivesOnRank(*comms[r]); });
}

}  // namespace troika::transport::conformance
