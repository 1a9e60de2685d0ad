// The shared-memory barrier's waiting (libclient/transport/shm/shm_sync.h): every way a rank
// can wait — spinning, yielding, sleeping on the futex — forced per rank through
// ShmWaitOptions, in every mix, with ranks arriving late past the others' windows. A sleeper's
// slice is longer than the test's timeout, so a lost wake-up hangs it into DEADLINE_EXCEEDED
// instead of being hidden by the next slice. Then abort and peer death in each mode, and the
// one-barrier small allreduce's results (bit-identical on every rank) across many
// back-to-back calls and sizes on both sides of its threshold.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/shm/shm_communicator.h"
#include "libclient/transport/shm/shm_transport.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/process_group.h"

namespace troika::transport {
namespace {

using Clock = std::chrono::steady_clock;
using conformance::Comms;
using conformance::ProcessGroup;
using shm_internal::ShmWaitCounts;
using shm_internal::ShmWaitOptions;

enum class Mode { kSpin, kYield, kSleep };
constexpr Mode kModes[] = {Mode::kSpin, Mode::kYield, Mode::kSleep};

const char* ModeName(Mode m) {
  return m == Mode::kSpin ? "spin" : m == Mode::kYield ? "yield" : "sleep";
}

// Waits only in `mode`. `slice`: a sleeper's longest FUTEX_WAIT (long: only a wake-up ends
// it; short: it also looks at its peers' processes between slices, as by default).
ShmWaitOptions Only(Mode mode, absl::Duration slice = absl::Hours(1)) {
  ShmWaitOptions o;
  o.sleep_slice = slice;
  switch (mode) {
    case Mode::kSpin:
      o.spins = INT64_MAX;
      o.yield_for = absl::ZeroDuration();
      break;
    case Mode::kYield:
      o.spins = 0;
      o.yield_for = absl::Hours(1);
      break;
    case Mode::kSleep:
      o.spins = 0;
      o.yield_for = absl::ZeroDuration();
      break;
  }
  return o;
}

int64_t CountOf(const ShmWaitCounts& c, Mode m) {
  return m == Mode::kSpin ? c.spinning : m == Mode::kYield ? c.yielding : c.sleeping;
}

ShmCommunicator& Shm(Communicator& comm) { return dynamic_cast<ShmCommunicator&>(comm); }

// Ranks 0..n-1 as threads, rank r waiting as modes[r].
Comms ConnectModes(Store& store, const std::vector<ShmWaitOptions>& modes,
                   const std::string& prefix, absl::Duration timeout) {
  const int n = static_cast<int>(modes.size());
  Comms comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorSpec spec{.rank = r, .size = n, .store_prefix = prefix, .timeout = timeout};
      auto comm = ShmTransport(modes[r]).Connect(spec, store);
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = *std::move(comm);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& c : comms) {
    if (c == nullptr) return {};
  }
  return comms;
}

// In round i, rank i % n arrives late (sleeps first), so every rank is in turn the one whose
// arrival must wake the others, and the others wait past any spin or yield window.
TEST(ShmWaitTest, EveryMixOfSpinningYieldingAndSleepingWakesEveryRank) {
  constexpr int kRanks = 3;
  constexpr int kRounds = 30;
  int mix = 0;
  for (Mode a : kModes) {
    for (Mode b : kModes) {
      for (Mode c : kModes) {
        const std::vector<Mode> modes = {a, b, c};
        const std::string name = absl::StrCat(ModeName(a), "/", ModeName(b), "/", ModeName(c));
        InMemoryStore store;
        Comms comms = ConnectModes(store, {Only(a), Only(b), Only(c)},
                                   absl::StrCat("mix", mix++, "/"), absl::Seconds(20));
        ASSERT_EQ(comms.size(), 3u) << name;
        conformance::OnEveryRank(comms, [&](int r) {
          for (int i = 0; i < kRounds; ++i) {
            if (i % kRanks == r) std::this_thread::sleep_for(std::chrono::microseconds(300));
            const absl::Status status = comms[r]->Barrier();
            ASSERT_TRUE(status.ok()) << name << " rank " << r << " round " << i << ": " << status;
          }
          // Not late in two rounds of three: it waited, and the wait ended in its mode.
          EXPECT_GT(CountOf(Shm(*comms[r]).wait_counts(), modes[r]), 0)
              << name << " rank " << r << " never woke while " << ModeName(modes[r]) << "ing";
        });
      }
    }
  }
}

// The same across processes (each rank's own mapping of the futex word), four ranks, each
// in its own mode (the fourth by default), through every collective of the conformance suite:
// every dtype and op at sizes on both sides of the one-barrier threshold.
TEST(ShmWaitTest, ProcessesInEveryModeRunEveryCollective) {
  constexpr int n = 4;
  ProcessGroup group(
      n,
      [](Communicator& comm) {
        conformance::CheckAllreduceOnRank(comm, conformance::AllreduceExpected(n));
        conformance::CheckAllgathervOnRank(comm);
        conformance::CheckBroadcastOnRank(comm);
        conformance::CheckInterleavedCollectivesOnRank(comm);
      },
      absl::Seconds(60),
      [](const CommunicatorSpec& spec, Store& store) {
        const ShmWaitOptions wait = spec.rank < 3 ? Only(kModes[spec.rank]) : ShmWaitOptions{};
        return ShmTransport(wait).Connect(spec, store);
      });
  const std::vector<int> codes = group.WaitAll();
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

class ShmWaitModeTest : public ::testing::TestWithParam<Mode> {};

// A sleeper's slice is an hour and the timeout a minute: only the abort's wake-up ends it.
TEST_P(ShmWaitModeTest, AbortWakesEveryRankWaitingThisWay) {
  const Mode mode = GetParam();
  InMemoryStore store;
  Comms comms = ConnectModes(store, {Only(mode), Only(mode), Only(mode), ShmWaitOptions{}},
                             absl::StrCat("abort-", ModeName(mode), "/"), absl::Seconds(60));
  ASSERT_EQ(comms.size(), 4u);
  const auto start = Clock::now();
  conformance::OnEveryRank(comms, [&](int r) {
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comms[r]->Abort();
      return;
    }
    const ShmWaitCounts before = Shm(*comms[r]).wait_counts();
    const absl::Status status = comms[r]->Barrier();
    EXPECT_TRUE(absl::IsCancelled(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "Abort() was called on rank 3")) << status;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "not woken";
    EXPECT_EQ(CountOf(Shm(*comms[r]).wait_counts(), mode), CountOf(before, mode) + 1)
        << "rank " << r << " was not " << ModeName(mode) << "ing when the abort came";
  });
}

// Rank 2's process dies while the others wait, each way; the others name it. A sleeper
// looks at its peers between slices (the default 50 ms).
TEST_P(ShmWaitModeTest, PeerDeathFailsEveryRankWaitingThisWay) {
  const Mode mode = GetParam();
  constexpr int n = 3;
  ProcessGroup group(
      n,
      [](Communicator& comm) {
        ASSERT_TRUE(comm.Barrier().ok());
        if (comm.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          raise(SIGKILL);
        }
        const absl::Status status = comm.Barrier();
        EXPECT_TRUE(absl::IsUnavailable(status)) << status;
        EXPECT_TRUE(absl::StrContains(status.message(), "rank 2 (pid")) << status;
      },
      absl::Seconds(60),
      [mode](const CommunicatorSpec& spec, Store& store) {
        return ShmTransport(Only(mode, shm_internal::kWaitSlice)).Connect(spec, store);
      });
  EXPECT_EQ(group.Wait(2), 128 + SIGKILL);
  EXPECT_EQ(group.Wait(0, absl::Seconds(30)), 0);
  EXPECT_EQ(group.Wait(1, absl::Seconds(30)), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, ShmWaitModeTest, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(ModeName(info.param)); });

// Rank r's input element i in call k: values whose sums round, so that a different order of
// reduction would show in the bits.
template <typename T>
T Value(int r, int k, size_t i) {
  const uint32_t h = static_cast<uint32_t>(r * 2654435761u ^ k * 40503u ^ i * 2246822519u);
  return static_cast<T>(std::ldexp(static_cast<double>(h % 100003) + 0.1 * r, -(h % 7)));
}

uint64_t Digest(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// Many back-to-back allreduces whose sizes switch between the one-barrier path (up to 16 KiB)
// and the two-barrier path, with the ranks waiting in different modes and one rank in turn
// late: every rank's result has the same bits, and on the one-barrier path they are the
// reduction in rank order.
TEST(ShmSmallAllreduceTest, BackToBackCallsGiveEveryRankTheSameBits) {
  constexpr int n = 4;
  constexpr int kCalls = 1200;
  constexpr size_t kCounts[] = {1, 3, 4096, 4097, 1, 2048, 5000, 1};  // float32: 4096 = 16 KiB
  constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kSum, ReduceOp::kMin,
                               ReduceOp::kProduct};
  InMemoryStore store;
  Comms comms = ConnectModes(
      store, {Only(Mode::kSpin), Only(Mode::kYield), Only(Mode::kSleep), ShmWaitOptions{}}, "bits/",
      absl::Seconds(30));
  ASSERT_EQ(comms.size(), 4u);
  std::vector<std::vector<uint64_t>> digests(n, std::vector<uint64_t>(kCalls));
  conformance::OnEveryRank(comms, [&](int r) {
    std::vector<float> data, expected;
    for (int k = 0; k < kCalls; ++k) {
      const size_t count = kCounts[k % std::size(kCounts)];
      const ReduceOp op = kOps[k % std::size(kOps)];
      data.resize(count);
      for (size_t i = 0; i < count; ++i) data[i] = Value<float>(r, k, i);
      if (k % 97 == r) std::this_thread::sleep_for(std::chrono::microseconds(500));
      const absl::Status status = comms[r]->Allreduce(data.data(), count, DataType::kFloat32, op);
      ASSERT_TRUE(status.ok()) << "call " << k << ": " << status;
      digests[r][k] = Digest(data.data(), count * sizeof(float));
      if (count * sizeof(float) > 16 * 1024) continue;
      expected.assign(count, 0);
      for (size_t i = 0; i < count; ++i) {
        float v = Value<float>(0, k, i);
        for (int q = 1; q < n; ++q) {
          const float x = Value<float>(q, k, i);
          v = op == ReduceOp::kSum   ? v + x
              : op == ReduceOp::kMin ? std::min(v, x)
              : op == ReduceOp::kMax ? std::max(v, x)
                                     : v * x;
        }
        expected[i] = v;
      }
      ASSERT_EQ(std::memcmp(data.data(), expected.data(), count * sizeof(float)), 0)
          << "call " << k << " count " << count << " rank " << r;
    }
  });
  for (int r = 1; r < n; ++r) {
    for (int k = 0; k < kCalls; ++k) {
      ASSERT_EQ(digests[r][k], digests[0][k]) << "call " << k << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace troika::transport
