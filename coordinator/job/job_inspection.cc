// Job: what it inspects about itself — stalls and deadlocks (HangDetector) on their timer
// and reports; stragglers, metrics and telemetry are fed by its negotiation (observers).

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

void Job::CheckDeadlockLocked() {
  if (!lifecycle_.running()) return;
  if (std::optional<std::string> deadlock = hangs_.Deadlock(roster_.departed(), size_)) {
    AbortLocked(AbortCause::kDeadlock, *deadlock);
  }
}

void Job::InspectStalls() {
  std::lock_guard<std::mutex> lock(mu_);
  InspectStallsLocked();
  lifecycle_.MaybeDone();
}

void Job::InspectStallsLocked() {
  if (!lifecycle_.running()) return;
  const HangDetector::Stalls stalls = hangs_.InspectStalls(clock_.Now());
  if (stalls.abort) return AbortLocked(AbortCause::kStall, *stalls.abort);
  if (stalls.warning) TROIKA_LOG(WARNING) << "job '" << name_ << "': " << *stalls.warning;
  if (stalls.next_check != absl::InfiniteFuture()) ArmStallTimerLocked(stalls.next_check);
}

void Job::ArmStallTimerLocked(absl::Time due) {
  if (stall_timer_ != 0) scheduler_.Cancel(stall_timer_);
  std::weak_ptr<Job> weak = weak_from_this();
  // Real-time scheduler, possibly fake clock: only the offset from now matters (see
  // ArmTimerLocked). A timer that finds nothing pending does not re-arm, so an idle job wakes
  // at most once more.
  stall_timer_ = scheduler_.RunAfter(due - clock_.Now(), [weak] {
    auto job = weak.lock();
    if (!job) return;
    std::lock_guard<std::mutex> lock(job->mu_);
    job->stall_timer_ = 0;
    job->InspectStallsLocked();
    job->lifecycle_.MaybeDone();
  });
}

StragglerSnapshot Job::StragglerSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stragglers_.Snapshot();
}

}  // namespace troika::coordinator
