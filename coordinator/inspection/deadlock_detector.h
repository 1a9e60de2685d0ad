#pragma once
// DeadlockDetector: what the ranks of one job are blocked waiting for (their WaitState
// reports), and whether that is a deadlock: every live rank is blocked, and every tensor any
// rank waits for is still pending in the negotiator (submitted by some ranks, not all) and
// submitted by that rank. No blocked rank can then submit what the others miss, so nothing can
// ever become ready. A waited-for name that is not pending was already negotiated and will
// complete; one that is pending without the waiting rank's submission is a later tensor of the
// same name (the rank's wait state trails the response it is about to get): no deadlock is
// declared then. A rank blocked in a join (kJoinTensorName, never in `pending`: a join is no
// stall) counts as blocked on it while some other rank is blocked on a pending tensor: that
// rank can never join, so the join never completes.
//
// Not thread-safe: the owning Job calls it under its lock.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/negotiation/negotiator.h"

namespace troika::coordinator {

class DeadlockDetector {
 public:
  // Records what `rank` waits for (any order, duplicates allowed); empty: not blocked.
  void Update(int rank, std::vector<std::string> waiting_for);
  // Forgets `rank` (it left).
  void Forget(int rank) { waits_.erase(rank); }
  // Whether any rank is blocked.
  bool any_waiting() const { return !waits_.empty(); }
  // Whether every rank in [0, size) not in `departed` is blocked (false if none is live).
  bool AllBlocked(const std::set<int>& departed, int size) const;

  // The deadlock message if the job is deadlocked given the negotiator's `pending` tensors:
  // "deadlock: rank 3 waits for 'grad/b'; ranks 0-2 wait for 'grad/a'" (ranks with the same
  // wait set grouped; the smallest groups first, then by lowest rank). nullopt otherwise.
  std::optional<std::string> Check(const std::vector<PendingTensor>& pending,
                                   const std::set<int>& departed, int size) const;

 private:
  std::map<int, std::vector<std::string>> waits_;  // blocked ranks only; sorted, distinct
};

}  // namespace troika::coordinator
