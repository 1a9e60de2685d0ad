#pragma once
// ShmSync: the synchronization of one rank over a shared-memory segment (shm_segment.h): a
// process-shared barrier, the group's abort record, and the watch on peer processes.
//
// Waiting: a rank that reaches a barrier before the others spins briefly (a few
// microseconds), yields its core between checks for up to 200 us (a peer without a core runs
// at once), then sleeps on the segment's futex word (FUTEX_WAIT on shared memory, not a
// private futex), in slices of at most kWaitSlice. Between slices it checks the deadline and,
// every kPeerCheckInterval, whether a peer process has exited (a pidfd per peer process,
// polled without blocking). The last rank to arrive bumps the word and wakes every waiter of
// every process with one FUTEX_WAKE.
//
// Abort: the first Abort() records a status code and a reason in the segment, then sets the
// word's abort bit and wakes every waiter, in every process, at once. Every later or pending
// Barrier() of any rank then returns that status. A rank whose wait outlives its timeout, or
// that sees a peer process exit, aborts the group the same way (DEADLINE_EXCEEDED naming the
// ranks that did not arrive; UNAVAILABLE naming the rank and pid that exited).
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

class ShmSync {
 public:
  // `segment` outlives this object.
  ShmSync(const ShmSegment& segment, int rank) : segment_(segment), rank_(rank) {}
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

 private:
  absl::Status WaitForRelease(uint32_t seen, uint64_t entered, absl::Duration timeout);
  // UNAVAILABLE naming a watched peer process that has exited, else OK.
  absl::Status CheckPeers() const;
  std::string MissingRanks(uint64_t entered) const;

  // Constant after construction.
  const ShmSegment& segment_;
  const int rank_;
  // Set by WatchPeers(): one pidfd per rank, -1 where not watched.
  std::vector<int> pidfds_;
};

}  // namespace troika::transport::shm_internal
