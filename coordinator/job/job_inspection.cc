// Job: what it inspects about itself (stalls, deadlocks, stragglers) and the telemetry fed
// by tensors becoming ready.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

void Job::CheckDeadlockLocked() {
  if (!deadlock_detection_ || state_ != State::kRunning || !deadlock_detector_.any_waiting() ||
      !deadlock_detector_.AllBlocked(departed_, size_)) {
    return;
  }
  // A rank blocked in a schedule is in (or about to enter) its next entry, or it deviated and
  // the schedule ends there: a schedule's tensors are no part of a deadlock.
  if (std::optional<std::string> deadlock =
          deadlock_detector_.Check(NegotiatedPendingLocked(), departed_, size_)) {
    AbortLocked(AbortCause::kDeadlock, *deadlock);
  }
}

void Job::InspectStalls() {
  std::lock_guard<std::mutex> lock(mu_);
  InspectStallsLocked();
  MaybeDoneLocked();
}

void Job::InspectStallsLocked() {
  if (state_ != State::kRunning) return;
  const std::vector<PendingTensor> pending = PendingLocked();
  const StallReport report = stall_inspector_.Inspect(pending, clock_.Now());
  const StallOptions& options = stall_inspector_.options();
  if (!report.past_shutdown.empty()) {
    AbortLocked(AbortCause::kStall,
                absl::StrCat(FormatStalls(report.past_shutdown, options.shutdown_time),
                             " (--stall_shutdown_time)"));
    return;
  }
  if (!report.newly_stalled.empty()) {
    TROIKA_LOG(WARNING) << "job '" << name_
                        << "': " << FormatStalls(report.newly_stalled, options.warning_time)
                        << ". The ranks may have diverged (different tensors or order), or be "
                           "hung or much slower.";
  }
  const absl::Time next = stall_inspector_.NextCheck(pending);
  if (next != absl::InfiniteFuture()) ArmStallTimerLocked(next);
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
    job->MaybeDoneLocked();
  });
}

void Job::RecordReadyLocked() { RecordReadyLocked(negotiator_.TakeReadyRecords()); }

void Job::RecordReadyLocked(const std::vector<ReadyRecord>& records) {
  for (const ReadyRecord& record : records) straggler_stats_.OnReady(record.arrivals);
  metrics_.OnReady(records);
  if (std::optional<TuningParams> tuned = telemetry_.OnReady(records, clock_.Now())) {
    NegotiatorOptions options = negotiator_.options();
    options.fusion_threshold_bytes = tuned->fusion_threshold_bytes;
    options.cycle_time = tuned->cycle_time;
    negotiator_.set_options(options);
    SyncSettingsLocked();  // tuning may have ended
  }
  // Checked every few dozen tensors and logged at most every 30 s, so a training step never
  // pays for it and the log does not flood.
  constexpr int64_t kCheckEvery = 64;
  constexpr absl::Duration kLogEvery = absl::Seconds(30);
  if (straggler_stats_.tensors() - straggler_checked_at_ < kCheckEvery) return;
  straggler_checked_at_ = straggler_stats_.tensors();
  const absl::Time now = clock_.Now();
  if (now - straggler_logged_at_ < kLogEvery) return;
  std::vector<int> stragglers = straggler_stats_.Stragglers(straggler_margin_);
  if (stragglers == logged_stragglers_) return;
  straggler_logged_at_ = now;
  if (stragglers.empty()) {
    TROIKA_LOG(INFO) << "job '" << name_ << "': no straggling ranks any more";
  } else {
    const coordinator::StragglerSnapshot snapshot = straggler_stats_.Snapshot();
    std::string detail;
    for (int r : stragglers) {
      const RankLateness& l = snapshot.ranks[r];
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", "rank ", r, " last for ",
                      l.window_last_count, " of ", snapshot.window_size, " recent tensors, by ",
                      absl::FormatDuration(l.window_last_lateness), " on average; mean lateness ",
                      absl::FormatDuration(l.mean_lateness), ", max ",
                      absl::FormatDuration(l.max_lateness));
    }
    TROIKA_LOG(WARNING) << "job '" << name_ << "': " << FormatRanks(stragglers)
                        << " straggling (--straggler_margin "
                        << absl::FormatDuration(straggler_margin_) << "): " << detail;
  }
  logged_stragglers_ = std::move(stragglers);
}

StragglerSnapshot Job::StragglerSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return straggler_stats_.Snapshot();
}

}  // namespace troika::coordinator
