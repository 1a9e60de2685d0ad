#include "libclient/transport/shm/shm_sync.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::transport::shm_internal {
namespace {

// Checks of the word before yielding: enough to catch a peer that arrives within a few
// microseconds, too few to steal a core from the ranks still working on a 2-core machine.
constexpr int kSpins = 256;
// Then the waiter yields its core between checks for this long before it sleeps: a peer that
// is runnable but has no core (ranks outnumber cores) runs at once instead of after a futex
// wake-up and a scheduling round, and a peer that is busy elsewhere costs the waiter at most
// this much CPU, given back in slices to whoever is runnable (docs/shm.md, Synchronization).
constexpr absl::Duration kYieldFor = absl::Microseconds(200);
// Checks between two readings of the clock while yielding.
constexpr int kYieldsPerClockRead = 16;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint32_t* Raw(std::atomic<uint32_t>& word) { return reinterpret_cast<uint32_t*>(&word); }

// Shared (not FUTEX_PRIVATE_FLAG): the word lives in memory mapped by several processes.
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, Raw(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, Raw(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

ShmSync::~ShmSync() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void ShmSync::WatchPeers() {
  pidfds_.assign(segment_.ranks(), -1);
  const pid_t self = getpid();
  for (int q = 0; q < segment_.ranks(); ++q) {
    const pid_t pid = segment_.control(q).pid.load(std::memory_order_acquire);
    if (q == rank_ || pid <= 0 || pid == self) continue;
    pidfds_[q] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  }
}

absl::Status ShmSync::Barrier(absl::Duration timeout) {
  Header& header = segment_.header();
  const uint32_t seen = header.word.load(std::memory_order_acquire);
  if ((seen & kAbortBit) != 0) return AbortStatus();
  const uint64_t entered =
      segment_.control(rank_).barriers.fetch_add(1, std::memory_order_relaxed) + 1;
  if (header.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(segment_.ranks())) {
    // Last to arrive: no rank touches `arrived` again before the word changes.
    header.arrived.store(0, std::memory_order_relaxed);
    uint32_t old = header.word.load(std::memory_order_relaxed);
    while (!header.word.compare_exchange_weak(old, (old & kAbortBit) | ((old + 1) & ~kAbortBit),
                                              std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
    }
    FutexWakeAll(header.word);
    return (old & kAbortBit) != 0 ? AbortStatus() : absl::OkStatus();
  }
  return WaitForRelease(seen, entered, timeout);
}

absl::Status ShmSync::WaitForRelease(uint32_t seen, uint64_t entered, absl::Duration timeout) {
  std::atomic<uint32_t>& word = segment_.header().word;
  for (int i = 0; i < kSpins; ++i) {
    const uint32_t now = word.load(std::memory_order_acquire);
    if (now != seen) return (now & kAbortBit) != 0 ? AbortStatus() : absl::OkStatus();
    CpuRelax();
  }
  const absl::Time yield_until = absl::Now() + kYieldFor;
  for (int i = 1;; ++i) {
    const uint32_t now = word.load(std::memory_order_acquire);
    if (now != seen) return (now & kAbortBit) != 0 ? AbortStatus() : absl::OkStatus();
    sched_yield();
    if (i % kYieldsPerClockRead == 0 && absl::Now() >= yield_until) break;
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  absl::Time next_check = start + kPeerCheckInterval;
  for (;;) {
    const uint32_t now = word.load(std::memory_order_acquire);
    if (now != seen) return (now & kAbortBit) != 0 ? AbortStatus() : absl::OkStatus();
    const absl::Time t = absl::Now();
    if (t >= deadline) {
      Abort(absl::DeadlineExceededError(
          absl::StrCat(MissingRanks(entered), " did not reach the collective within ",
                       absl::FormatDuration(timeout), " (rank ", rank_, " waited)")));
      return AbortStatus();
    }
    if (t >= next_check) {
      if (absl::Status dead = CheckPeers(); !dead.ok()) {
        Abort(dead);
        return AbortStatus();
      }
      next_check = t + kPeerCheckInterval;
    }
    FutexWait(word, seen, std::min(kWaitSlice, deadline - t));
  }
}

absl::Status ShmSync::CheckPeers() const {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (int q = 0; q < static_cast<int>(pidfds_.size()); ++q) {
    if (pidfds_[q] < 0) continue;
    fds.push_back({.fd = pidfds_[q], .events = POLLIN, .revents = 0});
    ranks.push_back(q);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return absl::OkStatus();
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const int q = ranks[i];
    return absl::UnavailableError(
        absl::StrCat("rank ", q, " (pid ", segment_.control(q).pid.load(std::memory_order_relaxed),
                     ") exited during a collective"));
  }
  return absl::OkStatus();
}

std::string ShmSync::MissingRanks(uint64_t entered) const {
  std::vector<int> missing;
  for (int q = 0; q < segment_.ranks(); ++q) {
    if (segment_.control(q).barriers.load(std::memory_order_relaxed) < entered) {
      missing.push_back(q);
    }
  }
  if (missing.empty()) return "some rank";  // they arrived as the timeout passed
  return absl::StrCat(missing.size() == 1 ? "rank " : "ranks [", absl::StrJoin(missing, ", "),
                      missing.size() == 1 ? "" : "]");
}

void ShmSync::Abort(const absl::Status& status) {
  Header& header = segment_.header();
  uint32_t expected = 0;
  if (header.abort_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    header.abort_code = static_cast<int32_t>(status.code());
    const std::string reason(status.message());
    const size_t n = std::min(reason.size(), sizeof(header.abort_reason) - 1);
    std::memcpy(header.abort_reason, reason.data(), n);
    header.abort_reason[n] = '\0';
    header.abort_state.store(2, std::memory_order_release);
  }
  header.word.fetch_or(kAbortBit, std::memory_order_acq_rel);
  FutexWakeAll(header.word);
}

absl::Status ShmSync::AbortStatus() const {
  const Header& header = segment_.header();
  if ((header.word.load(std::memory_order_acquire) & kAbortBit) == 0) return absl::OkStatus();
  // The record is written before the bit is set, unless another rank's abort set the bit
  // while the first writer was still writing (wait a moment for it), or that writer died.
  uint32_t state = header.abort_state.load(std::memory_order_acquire);
  for (int i = 0; state == 1 && i < 100000; ++i) {
    CpuRelax();
    state = header.abort_state.load(std::memory_order_acquire);
  }
  if (state != 2) {
    return absl::UnavailableError("the group was aborted by a rank that then exited");
  }
  return absl::Status(static_cast<absl::StatusCode>(header.abort_code), header.abort_reason);
}

}  // namespace troika::transport::shm_internal
