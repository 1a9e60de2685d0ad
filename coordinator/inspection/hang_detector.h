#pragma once
// HangDetector: whether a job hangs — tensors stalled past the warning or shutdown time
// (StallInspector) and deadlocks (DeadlockDetector) — judged on the pending tensors the job's
// negotiation tells when asked (JobNegotiation::Pending). A schedule's tensors that ranks
// report waiting for can stall; they are never part of a deadlock (a rank blocked in a
// schedule is in, or about to enter, its next entry, or it deviated and the schedule ends
// there).
//
// Thread contract: not thread-safe; the owning job calls under its lock.

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/inspection/deadlock_detector.h"
#include "coordinator/inspection/stall_inspector.h"
#include "coordinator/negotiation/job_negotiation.h"

namespace troika::coordinator {

class HangDetector {
 public:
  // `negotiation` (outlives this) is asked for pending tensors. `deadlock_detection`: false
  // and Deadlock() never finds one.
  HangDetector(const JobNegotiation& negotiation, StallOptions stall, bool deadlock_detection);

  // What `rank` reports waiting for (WaitState); empty: not blocked.
  void UpdateWaits(int rank, std::vector<std::string> waiting_for) {
    deadlocks_.Update(rank, std::move(waiting_for));
  }
  // `rank` left the job.
  void Forget(int rank) { deadlocks_.Forget(rank); }
  // Why the job is deadlocked (DeadlockDetector::Check), if every rank of [0, size) not in
  // `departed` is blocked on negotiation's pending tensors. Cheap unless every live rank is
  // blocked.
  std::optional<std::string> Deadlock(const std::set<int>& departed, int size) const;

  struct Stalls {
    std::optional<std::string> abort;    // a tensor is past the shutdown time: why the job ends
    std::optional<std::string> warning;  // tensors newly past the warning time, for the log
    absl::Time next_check = absl::InfiniteFuture();  // when to inspect again
  };
  // Inspects every pending tensor at `now` (StallInspector::Inspect: each stall is warned
  // about once).
  Stalls InspectStalls(absl::Time now);
  // When an inspection could next report something about the tensors pending now.
  absl::Time NextCheck() const { return stalls_.NextCheck(negotiation_.Pending()); }
  // The shortest time after a tensor's first arrival that an inspection can report it.
  absl::Duration FirstDeadline() const { return stalls_.FirstDeadline(); }
  // When tensors submitted at `now` can first be reported: now + FirstDeadline() while any
  // tensor is pending; InfiniteFuture when none is, or stalls are never reported.
  absl::Time FirstCheck(absl::Time now) const;

 private:
  const JobNegotiation& negotiation_;
  const bool deadlock_detection_;
  StallInspector stalls_;
  DeadlockDetector deadlocks_;
};

}  // namespace troika::coordinator
