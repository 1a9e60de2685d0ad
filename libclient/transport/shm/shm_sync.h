#pragma once
// ShmSync: the synchronization of one rank over a shared-memory segment (shm_segment.h): a
// process-shared barrier, the group's abort record, and the watch on peer processes.
//
// The barrier has no shared counter: a rank enters barrier k by storing k in its own slot's
// arrival count (SlotControl::barriers) and passes it once every rank's count has reached k.
// The rank whose arrival completes the barrier sees so at once, and only if a rank sleeps
// (Header::sleepers is not 0) does it bump the futex word and FUTEX_WAKE: peers that spin or
// yield are released without a system call. A sleeper counts itself in `sleepers` before it
// reads the word and checks the counts one last time, so either it sees the last arrival or
// the last arrival sees it (all sequentially consistent): no wake-up is lost.
//
// Waiting (ShmWaitOptions): a rank checks the counts `spins` times, then yields its core
// between checks for `yield_for` (a peer without a core runs at once), then sleeps on the
// futex word (FUTEX_WAIT on shared memory, not a private futex) in slices of at most
// kWaitSlice. By default it spins long only when the group's ranks fit the CPUs it may run on;
// when they outnumber them, a spinning waiter would hold the core its peer needs, so it
// yields almost at once. In every phase it checks, every kPeerCheckInterval, whether a peer
// process has exited (a pidfd per peer process, polled without blocking), and the deadline.
//
// Abort: the first Abort() records a status code and a reason in the segment, then sets the
// word's abort bit and wakes every waiter, in every process, at once; spinning and yielding
// waiters read the word at every check. Every later or pending Barrier() of any rank then
// returns that status. A rank whose wait outlives its timeout, or that sees a peer process
// exit, aborts the group the same way (DEADLINE_EXCEEDED naming the ranks that did not
// arrive; UNAVAILABLE naming the rank and pid that exited).
//
// Thread contract: Barrier() and WatchPeers() from one thread at a time (the collective's);
// Abort() and AbortStatus() from any thread, but not concurrently with destruction.

#include <atomic>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "libclient/transport/shm/shm_segment.h"

namespace troika::transport::shm_internal {

inline constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);
inline constexpr absl::Duration kPeerCheckInterval = absl::Milliseconds(100);

// How a rank waits at the barrier (docs/shm.md, Synchronization). Tests force each mode.
struct ShmWaitOptions {
  // Checks of the peers' arrivals, between CPU pause instructions, before the first yield.
  // Negative (the default): when the group's ranks fit the CPUs this process may run on,
  // adaptive, at most kSpinsOwnCore, halved (down to kSpinsFloor) after each wait that
  // spinning did not end, doubled after each that it did; when they outnumber them,
  // kSpinsShared. A fixed count otherwise.
  int64_t spins = -1;
  // Then the rank yields its core between checks for this long before it sleeps. Default
  // 200 us.
  absl::Duration yield_for = absl::Microseconds(200);
  // The longest FUTEX_WAIT before a sleeper looks at its deadline and the peer processes.
  // Default kWaitSlice; tests that must see a lost wake-up hang make it longer than the
  // timeout.
  absl::Duration sleep_slice = kWaitSlice;
};

// How this rank's waits ended: while spinning, yielding or sleeping. An arrival that
// completed its barrier did not wait and counts in none.
struct ShmWaitCounts {
  int64_t spinning = 0;
  int64_t yielding = 0;
  int64_t sleeping = 0;
};

inline constexpr int64_t kSpinsOwnCore = 4096;
inline constexpr int64_t kSpinsFloor = 32;
// None: a peer a waiter waits for may be waiting for its core (docs/shm.md, Synchronization).
inline constexpr int64_t kSpinsShared = 0;

class ShmSync {
 public:
  // `segment` outlives this object.
  ShmSync(const ShmSegment& segment, int rank, const ShmWaitOptions& options = {});
  ShmSync(const ShmSync&) = delete;
  ShmSync& operator=(const ShmSync&) = delete;
  ~ShmSync();

  // Starts watching the processes of the other ranks (their pids in the segment must be
  // written). Ranks in this process, and processes this one cannot see (another pid
  // namespace), are not watched: their failures are caught by timeouts and Abort().
  void WatchPeers();

  // Returns once every rank has entered this barrier (OK), or the group is aborted (its
  // status), or `timeout` passes or a watched peer exits (which aborts the group).
  absl::Status Barrier(absl::Duration timeout);

  // Aborts the group with `status` unless it is already aborted. Wakes every waiter.
  void Abort(const absl::Status& status);

  // The group's abort status, or OK while it is not aborted.
  absl::Status AbortStatus() const;

  // Only the collective thread.
  const ShmWaitCounts& wait_counts() const { return counts_; }

 private:
  // A waiter's clock: the deadline and the next look at the peer processes.
  struct Watch {
    absl::Duration timeout;
    absl::Time deadline;
    absl::Time next_check;
  };

  // Whether every rank has entered barrier `entered`.
  bool AllArrived(uint64_t entered) const;
  // True once the wait is over: every rank arrived (`status` OK) or the group is aborted.
  bool Released(uint64_t entered, absl::Status& status) const;
  absl::Status WaitForPeers(uint64_t entered, absl::Duration timeout);
  // Aborts the group and returns false with its status when the deadline has passed or a
  // watched peer process has exited; true otherwise.
  bool Supervise(uint64_t entered, Watch& watch, absl::Status& status);
  // After a wait: the next wait's spin budget (ShmWaitOptions::spins).
  void Adapt(bool short_wait);
  // One FUTEX_WAIT of at most `slice`, counted in Header::sleepers.
  void Sleep(uint64_t entered, absl::Duration slice);
  // Bumps the futex word and wakes every sleeper.
  void WakeSleepers();
  // UNAVAILABLE naming a watched peer process that has exited, else OK.
  absl::Status CheckPeers() const;
  std::string MissingRanks(uint64_t entered) const;

  // Constant after construction.
  const ShmSegment& segment_;
  const int rank_;
  const int64_t max_spins_;
  const bool adaptive_;
  const absl::Duration yield_for_;
  const absl::Duration sleep_slice_;
  // Set by WatchPeers(): one pidfd per rank, -1 where not watched.
  std::vector<int> pidfds_;
  // Only the collective thread.
  ShmWaitCounts counts_;
  int64_t spins_;  // this wait's spin budget
};

}  // namespace troika::transport::shm_internal
