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

// Checks between two readings of the clock (for the deadline and the peer processes) while
// spinning, and while yielding.
constexpr int64_t kSpinsPerClockRead = 1024;
constexpr int64_t kYieldsPerClockRead = 16;

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

// The CPUs this process may run on (its affinity mask, as a container's cpuset limits it).
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

int64_t ChooseSpins(const ShmWaitOptions& options, int ranks) {
  if (options.spins >= 0) return options.spins;
  return ranks <= UsableCpus() ? kSpinsOwnCore : kSpinsShared;
}

}  // namespace

ShmSync::ShmSync(const ShmSegment& segment, int rank, const ShmWaitOptions& options)
    : segment_(segment),
      rank_(rank),
      max_spins_(ChooseSpins(options, segment.ranks())),
      adaptive_(options.spins < 0),
      yield_for_(options.yield_for),
      sleep_slice_(options.sleep_slice),
      spins_(max_spins_) {}

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

// Every access to the arrival counts and `sleepers` is sequentially consistent: a sleeper's
// increment of `sleepers` precedes its last check of the counts, and the completing arrival's
// store precedes its read of `sleepers`, so one of the two sees the other (shm_sync.h).
absl::Status ShmSync::Barrier(absl::Duration timeout) {
  Header& header = segment_.header();
  if ((header.word.load(std::memory_order_acquire) & kAbortBit) != 0) return AbortStatus();
  std::atomic<uint64_t>& mine = segment_.control(rank_).barriers;
  const uint64_t entered = mine.load(std::memory_order_relaxed) + 1;
  mine.store(entered, std::memory_order_seq_cst);
  if (AllArrived(entered)) {
    // The last to arrive: whoever waits on the word must be woken; those spinning or
    // yielding see the counts themselves.
    if (header.sleepers.load(std::memory_order_seq_cst) != 0) WakeSleepers();
    return AbortStatus();
  }
  return WaitForPeers(entered, timeout);
}

bool ShmSync::AllArrived(uint64_t entered) const {
  for (int q = 0; q < segment_.ranks(); ++q) {
    if (segment_.control(q).barriers.load(std::memory_order_seq_cst) < entered) return false;
  }
  return true;
}

bool ShmSync::Released(uint64_t entered, absl::Status& status) const {
  if ((segment_.header().word.load(std::memory_order_acquire) & kAbortBit) != 0) {
    status = AbortStatus();
    return true;
  }
  if (!AllArrived(entered)) return false;
  status = absl::OkStatus();
  return true;
}

absl::Status ShmSync::WaitForPeers(uint64_t entered, absl::Duration timeout) {
  absl::Status status;
  const absl::Time start = absl::Now();
  Watch watch{timeout, start + timeout, start + kPeerCheckInterval};
  for (int64_t i = 1; i <= spins_; ++i) {
    if (Released(entered, status)) {
      ++counts_.spinning;
      Adapt(/*short_wait=*/true);
      return status;
    }
    CpuRelax();
    if (i % kSpinsPerClockRead == 0 && !Supervise(entered, watch, status)) return status;
  }
  const absl::Time yield_until = absl::Now() + yield_for_;
  for (int64_t i = 1; yield_for_ > absl::ZeroDuration(); ++i) {
    if (Released(entered, status)) {
      ++counts_.yielding;
      Adapt(/*short_wait=*/false);
      return status;
    }
    sched_yield();
    if (i % kYieldsPerClockRead != 0) continue;
    if (!Supervise(entered, watch, status)) return status;
    if (absl::Now() >= yield_until) break;
  }
  for (;;) {
    if (Released(entered, status)) {
      ++counts_.sleeping;
      Adapt(/*short_wait=*/false);
      return status;
    }
    if (!Supervise(entered, watch, status)) return status;
    Sleep(entered, std::min(sleep_slice_, watch.deadline - absl::Now()));
  }
}

// Spinning pays only while peers arrive within it. A peer that arrives only after this rank
// yielded was not running (another process holds its core, or it shares this rank's core):
// spinning longer would hold the core it needs, so the budget halves; it doubles again with
// each wait that spinning ends. (Yielding with nothing else runnable returns at once, so a
// small budget on free cores costs a system call per check, not a sleep.)
void ShmSync::Adapt(bool short_wait) {
  if (!adaptive_) return;
  spins_ = short_wait ? std::min(max_spins_, spins_ * 2)
                      : std::max(std::min(kSpinsFloor, max_spins_), spins_ / 2);
}

bool ShmSync::Supervise(uint64_t entered, Watch& watch, absl::Status& status) {
  const absl::Time t = absl::Now();
  if (t >= watch.deadline) {
    Abort(absl::DeadlineExceededError(
        absl::StrCat(MissingRanks(entered), " did not reach the collective within ",
                     absl::FormatDuration(watch.timeout), " (rank ", rank_, " waited)")));
    status = AbortStatus();
    return false;
  }
  if (t >= watch.next_check) {
    if (absl::Status dead = CheckPeers(); !dead.ok()) {
      Abort(dead);
      status = AbortStatus();
      return false;
    }
    watch.next_check = t + kPeerCheckInterval;
  }
  return true;
}

void ShmSync::Sleep(uint64_t entered, absl::Duration slice) {
  Header& header = segment_.header();
  header.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = header.word.load(std::memory_order_seq_cst);
  if ((seen & kAbortBit) == 0 && !AllArrived(entered) && slice > absl::ZeroDuration()) {
    FutexWait(header.word, seen, slice);
  }
  header.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmSync::WakeSleepers() {
  std::atomic<uint32_t>& word = segment_.header().word;
  uint32_t old = word.load(std::memory_order_relaxed);
  while (!word.compare_exchange_weak(old, (old & kAbortBit) | ((old + 1) & ~kAbortBit),
                                     std::memory_order_seq_cst, std::memory_order_relaxed)) {
  }
  FutexWakeAll(word);
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
